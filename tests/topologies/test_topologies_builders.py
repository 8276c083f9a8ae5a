"""Builders: N servers on leaf-spine or rail-optimised fabrics, oversubscription, mixed clusters."""

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies import load_cluster, mixed_cluster


def _uplinks(topo, switch_prefix):
    return {
        u: topo.link(u, "spine0").bandwidth_Bps
        for u in topo.graph
        if u.startswith(switch_prefix) and topo.graph.has_edge(u, "spine0")
    }


def test_oversubscription_divides_leaf_uplink_capacity():
    full = load_cluster("dgx-a100", nodes=8, fabric="leaf-spine")
    half = load_cluster("dgx-a100", nodes=8, fabric="leaf-spine", oversubscription=2)
    quarter = load_cluster("dgx-a100", nodes=8, fabric="leaf-spine", oversubscription="4:1")
    up_full, up_half, up_quarter = (_uplinks(t, "leaf") for t in (full, half, quarter))
    assert len(up_full) > 1 and up_full.keys() == up_half.keys() == up_quarter.keys()
    # leaf0 holds 20 HDR ports (25 GB/s each): 500 GB/s down, so 500 / 250 / 125 GB/s up
    assert up_full["leaf0"] == pytest.approx(500e9)
    for leaf, bw in up_full.items():
        assert up_half[leaf] == pytest.approx(bw / 2)
        assert up_quarter[leaf] == pytest.approx(bw / 4)


def test_leaves_fill_in_host_order():
    topo = load_cluster("dgx-a100", nodes=3, fabric="leaf-spine")  # 24 NICs, 20 per leaf
    assert topo.graph.has_edge("h0/nic0", "leaf0")
    assert topo.graph.has_edge("h2/nic3", "leaf0")
    assert topo.graph.has_edge("h2/nic4", "leaf1")
    assert topo.graph.nodes["leaf1"]["host"] == -1
    assert topo.graph.nodes["leaf1"]["in_network_reduction"] == "sharp"


def test_rail_optimised_puts_nic_i_of_every_server_on_rail_i():
    topo = load_cluster("hgx-h100", nodes=4)
    for host in range(4):
        for i in range(8):
            assert set(topo.graph.successors(f"h{host}/nic{i}")) == {f"h{host}/pcie{i // 2}", f"rail{i}"}
    assert sorted(_uplinks(topo, "rail")) == [f"rail{i}" for i in range(8)]
    assert topo.link("rail0", "spine0").bandwidth_Bps == pytest.approx(4 * 50e9)


def test_mixed_cluster_is_limited_by_the_slow_nic():
    topo = mixed_cluster([("dgx-a100", 2), ("g5.12xlarge", 2)])
    assert topo.world_size == 2 * 8 + 2 * 4
    assert topo.metadata["host_types"] == ["dgx-a100", "dgx-a100", "g5.12xlarge", "g5.12xlarge"]
    assert topo.metadata["fabric_link_kind"] == "ethernet"
    assert topo.gpu_spec_name(0) == "a100-sxm-80gb" and topo.gpu_spec_name(23) == "a10g"
    path = nx.shortest_path(topo.graph, "h0/gpu0", "h3/gpu0", weight="latency_s")
    slowest = min(topo.link(u, v).bandwidth_Bps for u, v in itertools.pairwise(path))
    assert slowest == 5e9  # g5.12xlarge's 40 Gb/s ENA
    assert not topo.in_network_reduction("sharp")


def test_large_cluster_builds():
    topo = load_cluster("dgx-a100", gpus=4096)
    assert topo.world_size == 4096
    assert topo.metadata["nodes"] == 512
    assert topo.ranks[-1] == "h511/gpu7"


@settings(max_examples=25, deadline=None)
@given(
    preset=st.sampled_from(["dgx-a100", "hgx-h100", "g5.12xlarge", "g5.48xlarge", "pcie-nvl-pairs"]),
    nodes=st.integers(min_value=1, max_value=12),
    fabric=st.sampled_from(["leaf-spine", "rail-optimised"]),
    oversubscription=st.floats(min_value=1.0, max_value=8.0),
)
def test_builders_give_valid_strongly_connected_graphs(preset, nodes, fabric, oversubscription):
    topo = load_cluster(preset, nodes=nodes, fabric=fabric, oversubscription=oversubscription)
    topo.validate()
    assert nx.is_strongly_connected(topo.graph)
    assert topo.metadata["nodes"] == nodes
    assert topo.world_size == nodes * topo.metadata["gpus_per_host"]
    for _, _, attrs in topo.graph.edges(data=True):
        assert attrs["bandwidth_Bps"] > 0 and attrs["latency_s"] >= 0
    for rank in range(topo.world_size):
        assert topo.host_of_rank(rank) == rank // topo.metadata["gpus_per_host"]
