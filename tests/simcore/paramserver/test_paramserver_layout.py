"""Sharding by bytes, server placement, and the settings' boundary checks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.paramserver import (
    MODES,
    PLAIN_PS_MODES,
    PS_MODES,
    Placement,
    PSConfig,
    load_ps_cluster,
    normalize_mode,
    normalize_ps_mode,
    parse_placement,
    shard_layers,
)
from simcore.paramserver.layout import default_shards, server_devices
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer, Workload
from tests.paramserver_helpers import uniform_workload
from tests.paths import REPO
from topologies import load_cluster


def _workload(sizes: list[int]) -> Workload:
    layers = tuple(Layer(f"l{i}", "linear", -1, p, 1.0, 2.0, 0.0, 0.0, 0.0) for i, p in enumerate(sizes))
    return Workload("sizes", layers, (), "bf16", 0, "test")


def test_uniform_layers_shard_evenly() -> None:
    layout = shard_layers(uniform_workload(layers=8), 4)
    assert layout.shard_params == (8_000_000,) * 4 and layout.imbalance == 1.0
    assert layout.layer_shard == (0, 1, 2, 3, 0, 1, 2, 3)


def test_a_large_embedding_makes_a_hot_shard() -> None:
    layout = shard_layers(load_workload("gpt2-small", seq_len=128), 16)
    assert layout.imbalance > 2.0  # the 38.6M-parameter token embedding cannot be split
    assert sum(layout.shard_params) == load_workload("gpt2-small", seq_len=128).params


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=40), st.integers(1, 12))
def test_greedy_sharding_conserves_parameters_and_stays_within_one_layer(
    sizes: list[int], shards: int
) -> None:
    layout = shard_layers(_workload(sizes), shards)
    assert sum(layout.shard_params) == sum(sizes)
    assert max(layout.shard_params) - min(layout.shard_params) <= max(sizes)
    for size, shard in zip(sizes, layout.layer_shard, strict=True):
        assert (shard == -1) == (size == 0)
    assert layout.imbalance >= 1.0


def test_colocated_shards_spread_over_the_worker_nodes() -> None:
    topo = load_ps_cluster("g5.12xlarge", 8, Placement(), loader=load_cluster)
    assert default_shards(topo, 8, Placement()) == 2
    assert server_devices(topo, 8, 2, Placement()) == ("h0/gpu0", "h1/gpu0")
    assert server_devices(topo, 8, 3, Placement()) == ("h0/gpu0", "h0/gpu2", "h1/gpu1")


def test_dedicated_servers_get_nodes_of_their_own() -> None:
    topo = load_ps_cluster("g5.12xlarge", 8, Placement("dedicated", 2), loader=load_cluster)
    assert topo.world_size == 16 and len(topo.hosts) == 4
    devices = server_devices(topo, 8, 4, Placement("dedicated", 2))
    assert devices == ("h2/gpu0", "h3/gpu0", "h2/gpu1", "h3/gpu1")
    assert default_shards(topo, 8, Placement("dedicated", 2)) == 8
    lone = load_ps_cluster(
        "dgx-a100", 1, Placement("dedicated", 1), loader=load_cluster
    )  # a one-GPU baseline still gets a node
    assert lone.world_size == 9 and server_devices(lone, 1, 2, Placement("dedicated", 1)) == (
        "h1/gpu0",
        "h1/gpu1",
    )


@pytest.mark.parametrize("cluster", ["g5.48xlarge", "topologies/presets/g5.48xlarge.yaml"])
def test_fewer_workers_than_a_server_holds_still_get_a_whole_server_node(cluster: str) -> None:
    """Regression: 4 workers on an 8-GPU server type; the server node has all 8 devices."""
    path = str(REPO / cluster) if cluster.endswith(".yaml") else cluster
    topo = load_ps_cluster(path, 4, Placement("dedicated", 1), loader=load_cluster)
    assert topo.world_size == 12 and len(topo.hosts) == 2
    assert {topo.host_of_rank(r) for r in range(4)} == {0}
    assert default_shards(topo, 4, Placement("dedicated", 1)) == 8
    assert server_devices(topo, 4, 2, Placement("dedicated", 1)) == ("h1/gpu0", "h1/gpu1")


def test_a_one_type_cluster_file_grows_by_its_server_nodes() -> None:
    path = REPO / "topologies" / "examples" / "two-g5-like.yaml"
    topo = load_ps_cluster(
        str(path), 8, Placement("dedicated", 1), loader=load_cluster
    )  # both listed nodes hold workers
    assert topo.world_size == 12 and len(topo.hosts) == 3
    loopback = REPO / "topologies" / "examples" / "cpu-loopback.yaml"
    with pytest.raises(TrainsimError, match="needs 1 node"):  # no fabric: nothing joins a second node
        load_ps_cluster(str(loopback), 1, Placement("dedicated", 1), loader=load_cluster)


def test_a_cluster_file_without_spare_nodes_cannot_host_dedicated_servers() -> None:
    path = REPO / "topologies" / "examples" / "mixed-dgx-g5.yaml"
    with pytest.raises(TrainsimError, match="needs 1 node"):
        load_ps_cluster(str(path), 24, Placement("dedicated", 1), loader=load_cluster)
    topo = load_ps_cluster(
        str(path), 16, Placement("dedicated", 1), loader=load_cluster
    )  # the first g5 node serves
    assert server_devices(topo, 16, 1, Placement("dedicated", 1)) == ("h2/gpu0",)


def test_settings_are_checked_at_the_boundary() -> None:
    assert parse_placement("dedicated:3") == Placement("dedicated", 3)
    assert parse_placement(" Colocated ") == Placement("colocated")
    for bad in ("remote", "colocated:2", "dedicated:x", "dedicated:0"):
        with pytest.raises(TrainsimError):
            parse_placement(bad)
    assert normalize_mode("ASYNC") == "ps-async" and PSConfig(mode="ssp").mode == "ps-ssp"
    with pytest.raises(TrainsimError, match="allowed: ps-sync"):
        normalize_mode("hogwild")
    for kwargs in ({"shards": 0}, {"staleness_bound": -1}, {"steps": 0}):
        with pytest.raises(TrainsimError):
            PSConfig(**kwargs)  # type: ignore[arg-type]


def test_modes_accept_the_ps_prefix_and_reject_unknown_ones() -> None:
    for rules in MODES.values():  # one table: both spellings name the same mode either way
        for spelling in (rules.name, rules.plain, rules.name.upper()):
            assert (normalize_mode(spelling), normalize_ps_mode(spelling)) == (rules.name, rules.plain)
    assert PS_MODES == ("ps-sync", "ps-async", "ps-ssp", "ps-mitigated")
    assert PLAIN_PS_MODES == ("sync", "async", "ssp", "mitigated")
    assert normalize_ps_mode("ps-SSP") == "ssp"
    assert normalize_ps_mode("mitigated") == "mitigated"
    with pytest.raises(TrainsimError, match="allowed: sync, async, ssp, mitigated"):
        normalize_ps_mode("hogwild")
