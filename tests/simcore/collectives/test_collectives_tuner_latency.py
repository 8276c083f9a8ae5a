"""NCCL's tuner ranks by its own model; trainsim prices what it runs by its own.

NCCL's model (ncclTopoGetAlgoTime) is latency + bytes / bandwidth: no pipeline fill, trees derated at
medium sizes by its treeCorrectionFactor, and every node-crossing hop at the network plugin's
reported latency where the plugin reports one.

aws-ofi-nccl reports 75 us for its network device on p4d, p4de and p5 (src/platform-aws.cpp,
platform_data_map ``.latency``; ``OFI_NCCL_NET_LATENCY`` overrides it). NCCL stores it as
``graph->latencyInter`` (src/graph/search.cc) and adds it to every node-crossing hop's latency when
it predicts an (algorithm, protocol) pair, twice for Simple (src/graph/tuning.cc). The hand counts
below: on 2 nodes a ring all-reduce crosses nodes 2(n-1) = 2 times, a tree or NVLS tree 2 x depth
= 2 times; on p5 the fabric's own NIC-to-NIC latency is 2 x 11 us (the preset's ``nic_latency``).
"""

from __future__ import annotations

import functools

import pytest

from simcore.collectives import build_plan, price
from simcore.collectives.cost import latency_s, tuner_time_s
from simcore.collectives.options import NcclOptions
from simcore.errors import TrainsimError
from simcore.topology import Topology
from topologies import load_cluster

US = 1e-6
MiB = 1 << 20
PLUGIN_US = 75.0  # aws-ofi-nccl platform_data_map, p4d / p4de / p5
P5_FABRIC_US = 2 * 11.0  # p5 preset: nic_latency 11 us on each side
RING_PLATEAU = 1.4  # NCCL: multi-node Simple ring all-reduce latency, Ampere and later
NET_HOPS_2_NODES = 2  # ring 2(n-1), trees 2 x depth(2 nodes) = 2


@functools.cache
def _p5(nodes: int = 2) -> Topology:
    return load_cluster("p5.48xlarge", nodes=nodes)


def _tuner_us(
    algorithm: str, protocol: str, size: float, topology: Topology, plugin_us: float | None
) -> float:
    options = None if plugin_us is None else NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": str(plugin_us)})
    priced = price(topology, "all_reduce", size, algorithm=algorithm, protocol=protocol, options=options)
    plan = build_plan(topology, "all_reduce", size, algorithm=algorithm, protocol=protocol)
    return tuner_time_s(plan, priced.costs, protocol, size, priced.info) / US


def _hand_delta_us(algorithm: str, protocol: str) -> float:
    per_hop = (PLUGIN_US - P5_FABRIC_US) * (2 if protocol == "Simple" else 1)
    plateau = RING_PLATEAU if (algorithm, protocol) == ("ring", "Simple") else 1.0
    return NET_HOPS_2_NODES * per_hop * plateau


@pytest.mark.parametrize(
    ("algorithm", "protocol"),
    [
        ("ring", "LL"),
        ("ring", "LL128"),
        ("ring", "Simple"),
        ("tree", "LL128"),
        ("tree", "Simple"),
        ("nvls_tree", "Simple"),
    ],
)
def test_tuner_sees_every_network_hop_at_the_plugin_latency(algorithm: str, protocol: str) -> None:
    """LL/LL128: 2 hops x (75 - 22) us = 106 us more than at the fabric's own 22 us; Simple twice
    that; a Simple ring x 1.4 (NCCL's plateau)."""
    at_plugin = _tuner_us(algorithm, protocol, 16 * MiB, _p5(), None)
    at_fabric = _tuner_us(algorithm, protocol, 16 * MiB, _p5(), P5_FABRIC_US)
    assert at_plugin - at_fabric == pytest.approx(_hand_delta_us(algorithm, protocol), rel=1e-9)


def test_tuner_prices_a_tree_without_its_fill_and_with_nccls_tree_correction() -> None:
    """Two DGX A100 nodes on InfiniBand (no plugin latency), 16 MiB tree / Simple: NCCL's model is
    latency + bytes / (bandwidth x 0.7) (treeCorrectionFactor[Simple][log2(16 MiB / 64) = 18]); the
    price is latency + pipeline fill + bytes / bandwidth."""
    topology, size = load_cluster("dgx-a100", gpus=16), 16 * MiB
    priced = price(topology, "all_reduce", size, algorithm="tree", protocol="Simple")
    plan = build_plan(topology, "all_reduce", size, algorithm="tree", protocol="Simple")
    (cost,), (phase,) = priced.costs, plan.phases
    bare = latency_s(phase.hops, "Simple", priced.info, "all_reduce", size)
    assert cost.latency_s > bare  # the fill
    expected = bare + max(cost.link_s / 0.7, cost.engine_s)
    assert tuner_time_s(plan, priced.costs, "Simple", size, priced.info) == pytest.approx(expected, rel=1e-12)


def test_nccl_runs_what_its_tuner_ranks_first_priced_as_it_runs() -> None:
    """p5, 2 nodes, 16 MiB: a ring / LL128 is the cheapest price, but NCCL's model ranks the tree /
    LL128 first (its latency is lower, its fill not in the model); NCCL runs the tree, priced as it."""
    topology, size = _p5(), 16 * MiB
    pairs = [("ring", "LL"), ("ring", "LL128"), ("ring", "Simple")]
    pairs += [("tree", "LL"), ("tree", "LL128"), ("tree", "Simple"), ("nvls_tree", "Simple")]
    priced = {
        pair: price(topology, "all_reduce", size, algorithm=pair[0], protocol=pair[1]) for pair in pairs
    }
    ranked = {pair: _tuner_us(*pair, size, topology, None) for pair in pairs}
    chosen = price(topology, "all_reduce", size)
    assert (chosen.algorithm, chosen.protocol) == min(ranked, key=ranked.__getitem__) == ("tree", "LL128")
    assert min(priced, key=lambda pair: priced[pair].closed_form_s) == ("ring", "LL128")
    assert chosen.closed_form_s == priced[("tree", "LL128")].closed_form_s


def test_pinned_prices_do_not_depend_on_the_reported_latency() -> None:
    topology, size = _p5(), 16 * MiB
    prices = {
        latency: price(
            topology,
            "all_reduce",
            size,
            algorithm="tree",
            protocol="Simple",
            options=NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": latency}),
        ).closed_form_s
        for latency in ("0", "75", "500")
    }
    assert len(set(prices.values())) == 1


def test_efa_presets_carry_the_plugin_latency_and_one_node_ignores_it() -> None:
    for name in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"):
        assert price(
            load_cluster(name, nodes=2), "all_reduce", MiB
        ).info.tuner_net_latency_s == pytest.approx(75 * US)
        assert price(load_cluster(name, nodes=1), "all_reduce", MiB).info.tuner_net_latency_s is None
    assert price(load_cluster("dgx-a100", gpus=16), "all_reduce", MiB).info.tuner_net_latency_s is None


def test_plugin_latency_from_the_environment() -> None:
    assert NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "75"}).plugin_net_latency_us == 75.0
    assert NcclOptions.from_env({}).plugin_net_latency_us is None
    platform = NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "75"})
    assert NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "0"}).over(platform).plugin_net_latency_us == 0.0
    assert NcclOptions().over(platform).plugin_net_latency_us == 75.0
    for bad in ("-1", "lots", "nan", "20000"):
        with pytest.raises(TrainsimError, match=r"OFI_NCCL_NET_LATENCY=.* is not allowed; give microseconds"):
            NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": bad})
