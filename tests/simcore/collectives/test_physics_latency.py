"""Ring and tree latency terms against the theory, on uncontended groups.

- Ring all-reduce (Patarasuk & Yuan 2009): 2(p-1) steps, each moving S/p over every hop:
  ``T = 2(p-1)/p * S/B + 2(p-1) alpha``. On CPU ranks (gloo) alpha is the hop's route latency plus
  the per-step software cost (``simcore.collectives.plan.STEP_OVERHEAD_S``); with NCCL it is the
  per-hop latency of its tuning tables (``data/nccl.yaml``, NCCL 2.27 ``ncclTunerConstantsDefaults``)
  after the base latency, and of the 2(p-1) steps over n nodes 2(n-1) cross nodes.
- Double binary tree (NCCL >= 2.4): the data goes up the trees (reduce) and back down (broadcast),
  so the latency counts the chain inside a node twice (2(g-1) NVLink hops) and the tree twice
  (2 x depth network hops).
"""

from __future__ import annotations

import functools

import pytest

from simcore.collectives import build_plan, closed_form_time, price
from simcore.collectives.cost import latency_s
from simcore.collectives.tree import dtree_depth
from simcore.topology import Topology
from topologies import load_cluster
from topologies.cpu import cpu_cluster

US = 1e-6
# gloo over loopback: every rank reaches the next through the host's loopback hub (two links)
LOOPBACK_BPS, LOOPBACK_S, STEP_S = 3e9, 10e-6, 1e-6
# nccl.yaml, NCCL 2.27: base latency, NVLink / network hop latency (Simple)
RING_BASE_US, RING_NVLINK_US, RING_NET_US = 8.4, 3.4, 14.0
TREE_BASE_US, TREE_NVLINK_US, TREE_NET_US = 8.4, 4.0, 14.0
AMD_NET_OVERHEAD_US = 2.0 * 3  # getNetOverhead on AMD hosts, x3 for Simple
RING_PLATEAU = 1.4  # multi-node Simple ring all-reduce, Ampere


@functools.cache
def _dgx(gpus: int) -> Topology:
    return load_cluster("dgx-a100", gpus=gpus)


@pytest.mark.parametrize("p", [2, 3, 4, 6])
@pytest.mark.parametrize("size", [1 << 10, 1 << 20, 1 << 26])
def test_gloo_ring_all_reduce_is_bandwidth_plus_2_p_minus_1_alphas(p: int, size: int) -> None:
    topology = cpu_cluster(p, loopback_Bps=LOOPBACK_BPS, loopback_latency_s=LOOPBACK_S)
    alpha = 2 * LOOPBACK_S + STEP_S
    expected = 2 * (p - 1) / p * size / LOOPBACK_BPS + 2 * (p - 1) * alpha
    assert closed_form_time(topology, "all_reduce", "ring", size) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_nccl_ring_on_one_node_pays_2_p_minus_1_nvlink_hops(p: int) -> None:
    """DGX A100: NVSwitch links of 300 GB/s at their achievable 80%, Ampere's 230 GB/s kernel cap."""
    size = 1 << 28
    group = tuple(range(p))
    got = closed_form_time(_dgx(8), "all_reduce", "ring", size, group, protocol="Simple")
    latency = (RING_BASE_US + 2 * (p - 1) * RING_NVLINK_US) * US
    bandwidth = max(2 * (p - 1) / p * size / (300e9 * 0.8), 2 * (p - 1) / p * size / 230e9)
    assert got == pytest.approx(latency + bandwidth, rel=1e-9)


def test_nccl_ring_across_nodes_counts_2_n_minus_1_network_hops() -> None:
    """32 ranks on 4 DGX A100 nodes (AMD EPYC hosts): 2 x 31 steps, 2 x 3 of them between nodes."""
    topology, size = _dgx(32), float(1 << 24)
    hops = build_plan(topology, "all_reduce", size, algorithm="ring", protocol="Simple").phases[0].hops
    assert (hops.intra, hops.inter) == (2 * 31 - 2 * 3, 2 * 3)
    info = price(topology, "all_reduce", size, algorithm="ring", protocol="Simple").info
    assert info.vendor == "amd"
    net_us = RING_NET_US + 2 * hops.fabric_s / US  # Simple pays the fabric's latency twice (GDR flush)
    intra_us = max(RING_NVLINK_US, AMD_NET_OVERHEAD_US)
    expected = (RING_BASE_US + hops.intra * intra_us + hops.inter * net_us) * RING_PLATEAU * US
    assert latency_s(hops, "Simple", info, "all_reduce", size) == pytest.approx(expected, rel=1e-12)


def test_nccl_double_binary_tree_depths_by_hand() -> None:
    """ncclGetDtree: 2 nodes, each tree one edge deep; 4 nodes, tree 0 = 0 <- 2 <- {1, 3} (depth 2)
    and its mirror 3 <- 1 <- {0, 2} (depth 2); 8 nodes, depth log2(8) = 3."""
    assert [dtree_depth(n) for n in (1, 2, 4, 8)] == [0, 1, 2, 3]


@pytest.mark.parametrize(("gpus", "nodes", "depth"), [(8, 1, 0), (16, 2, 1), (32, 4, 2)])
def test_tree_latency_counts_reduce_and_broadcast(gpus: int, nodes: int, depth: int) -> None:
    """Up and down: 2 (g - 1) NVLink hops in the node's chain and 2 x depth network hops."""
    topology, size = _dgx(gpus), float(1 << 24)
    hops = build_plan(topology, "all_reduce", size, algorithm="tree", protocol="Simple").phases[0].hops
    assert (hops.intra, hops.inter) == (2 * (8 - 1), 2 * depth)
    info = price(topology, "all_reduce", size, algorithm="tree", protocol="Simple").info
    net_us = TREE_NET_US + 2 * hops.fabric_s / US
    expected = (TREE_BASE_US + 2 * 7 * TREE_NVLINK_US + 2 * depth * net_us) * US
    assert latency_s(hops, "Simple", info, "all_reduce", size) == pytest.approx(expected, rel=1e-12)
    assert info.nodes == nodes
