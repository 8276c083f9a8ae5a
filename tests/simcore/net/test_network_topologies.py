"""Small cluster graphs for the network tests, and the routing rules they must obey.

``small_cluster`` follows the topology naming convention (servers ``h{i}/...``, unprefixed fabric
switches), so the router takes its fast hierarchical path; ``random_graph`` does not, so it falls
back to Dijkstra. Both directions of every link are always present, as the topology contract asks.
"""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.net.network import Network
from simcore.net.routing import Router
from simcore.topology import Topology

GBps = 1e9


def duplex(g: nx.DiGraph, a: str, b: str, bandwidth_Bps: float, latency_s: float, kind: str) -> None:
    for u, v in ((a, b), (b, a)):
        g.add_edge(u, v, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, kind=kind)


def small_cluster(
    hosts: int = 2,
    gpus: int = 4,
    nics: int = 2,
    leaves: int = 1,
    spines: int = 1,
    *,
    nvlink_Bps: float = 100 * GBps,
    pcie_Bps: float = 20 * GBps,
    nic_Bps: float = 10 * GBps,
    uplink_Bps: float = 20 * GBps,
    rail_aligned_pcie: bool = True,
) -> Topology:
    """``hosts`` servers (GPUs on an NVSwitch, each GPU on the PCIe switch of one NIC) on a leaf-spine."""
    g = nx.DiGraph()
    ranks = []
    for h in range(hosts):
        sw = f"h{h}/nvswitch"
        g.add_node(sw, kind="switch", host=h, host_type="box")
        for n in range(nics):
            g.add_node(f"h{h}/nic{n}", kind="nic", host=h, host_type="box")
            g.add_node(f"h{h}/pcie{n}", kind="pcie", host=h, host_type="box")
            duplex(g, f"h{h}/nic{n}", f"h{h}/pcie{n}", pcie_Bps, 1e-6, "pcie")
            duplex(g, f"h{h}/nic{n}", f"leaf{h % leaves}", nic_Bps, 1e-6, "ib")
        for i in range(gpus):
            gpu = f"h{h}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=h, host_type="box", gpu="a100-sxm-80gb")
            duplex(g, gpu, sw, nvlink_Bps, 0.5e-6, "nvswitch")
            pcie = f"h{h}/pcie{(i if rail_aligned_pcie else 0) % nics}"
            duplex(g, gpu, pcie, pcie_Bps, 1e-6, "pcie")
            ranks.append(gpu)
    for leaf in range(leaves):
        g.add_node(f"leaf{leaf}", kind="switch", host=-1, host_type="")
        for s in range(spines):
            g.add_node(f"spine{s}", kind="switch", host=-1, host_type="")
            duplex(g, f"leaf{leaf}", f"spine{s}", uplink_Bps, 1e-6, "ib")
    if spines == 0:
        for a, b in itertools.combinations(range(leaves), 2):
            duplex(g, f"leaf{a}", f"leaf{b}", uplink_Bps, 1e-6, "ib")
    return Topology("small", g, ranks, {"gpus_per_host": gpus})


def random_graph(seed: int, nodes: int = 8) -> Topology:
    """A connected random graph with arbitrary names (not the server convention)."""
    import random

    rng = random.Random(seed)
    g = nx.DiGraph()
    names = [f"dev{i}" for i in range(nodes)]
    for n in names:
        g.add_node(n, kind="gpu")
    for i in range(1, nodes):
        duplex(
            g,
            names[i],
            names[rng.randrange(i)],
            rng.choice([1, 2, 5]) * GBps,
            rng.choice([1, 2, 3]) * 1e-6,
            "pcie",
        )
    for _ in range(nodes // 2):
        a, b = rng.sample(names, 2)
        duplex(g, a, b, rng.choice([1, 2, 5]) * GBps, rng.choice([1, 2, 3]) * 1e-6, "nvlink")
    return Topology("random", g, names)


def _latency(topo: Topology, route: tuple[tuple[str, str], ...]) -> float:
    return sum(topo.graph.edges[e]["latency_s"] for e in route)


def _is_path(topo: Topology, route: tuple[tuple[str, str], ...], src: str, dst: str) -> bool:
    nodes = [src] + [v for _, v in route]
    return (
        route[0][0] == src
        and nodes[-1] == dst
        and all(topo.graph.has_edge(*e) for e in route)
        and all(a[1] == b[0] for a, b in itertools.pairwise(route))
    )


@settings(max_examples=25, deadline=None)
@given(
    hosts=st.integers(1, 4),
    gpus=st.integers(1, 4),
    nics=st.integers(1, 3),
    leaves=st.integers(1, 3),
    spines=st.integers(0, 2),
    data=st.data(),
)
def test_hierarchical_route_is_a_lowest_latency_path(
    hosts: int, gpus: int, nics: int, leaves: int, spines: int, data: st.DataObject
) -> None:
    """Where every NIC of a server shares one leaf, the fast route is as short as Dijkstra's."""
    topo = small_cluster(hosts, gpus, nics, leaves, spines)
    router = Router(topo.graph)
    assert router.hierarchical
    src = data.draw(st.sampled_from(topo.ranks))
    dst = data.draw(st.sampled_from(topo.ranks))
    route = router.route(src, dst)
    if src == dst:
        assert route == ()
        return
    assert _is_path(topo, route, src, dst)
    best = nx.shortest_path_length(topo.graph, src, dst, weight="latency_s")
    assert _latency(topo, route) == pytest.approx(best, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 10), data=st.data())
def test_fallback_route_on_unconventional_graphs_is_dijkstra(
    seed: int, nodes: int, data: st.DataObject
) -> None:
    topo = random_graph(seed, nodes)
    router = Router(topo.graph)
    src, dst = data.draw(st.sampled_from(topo.ranks)), data.draw(st.sampled_from(topo.ranks))
    route = router.route(src, dst)
    if src != dst:
        assert _is_path(topo, route, src, dst)
        assert _latency(topo, route) == pytest.approx(
            nx.shortest_path_length(topo.graph, src, dst, weight="latency_s")
        )


def test_gpu_uses_its_rail_aligned_nic_and_intra_host_traffic_stays_inside() -> None:
    topo = small_cluster(hosts=2, gpus=4, nics=4, leaves=1, spines=0)
    router = Router(topo.graph)
    for i in range(4):
        assert router.gateway(f"h0/gpu{i}") == f"h0/nic{i}"
        route = router.route(f"h0/gpu{i}", f"h1/gpu{3 - i}")
        assert (f"h0/nic{i}", "leaf0") in route and ("leaf0", f"h1/nic{3 - i}") in route
    assert all(u.startswith("h0/") and v.startswith("h0/") for u, v in router.route("h0/gpu0", "h0/gpu3"))


def test_preset_gpus_use_rail_aligned_nics() -> None:
    """On the DGX A100 preset, GPU i of every server sends through NIC i."""
    topologies = pytest.importorskip("topologies")
    topo = topologies.load_cluster("dgx-a100", gpus=16)
    router = Router(topo.graph)
    assert router.hierarchical
    for i in range(8):
        assert router.gateway(f"h0/gpu{i}") == f"h0/nic{i}"
    route = router.route("h0/gpu3", "h1/gpu3")
    assert route[0] != ("h0/nic3", "h1/nic3") and any(u == "h0/nic3" for u, _ in route)


def test_spines_are_chosen_by_destination_so_traffic_spreads() -> None:
    """Equal-cost spines: different destination servers use different spines (D-mod-k)."""
    topo = small_cluster(hosts=4, gpus=1, nics=1, leaves=4, spines=2)
    router = Router(topo.graph)
    spines = {
        next(v for u, v in router.route("h0/gpu0", f"h{d}/gpu0") if v.startswith("spine")) for d in (1, 2, 3)
    }
    assert spines == {"spine0", "spine1"}


def test_routes_are_shared_per_topology_and_deterministic() -> None:
    topo = small_cluster(hosts=3, leaves=2, spines=2)
    a = Network(simpy.Environment(), topo)
    b = Network(simpy.Environment(), topo)
    assert a.router is b.router
    fresh = Router(topo.graph)
    assert all(a.route(s, d) == fresh.route(s, d) for s in topo.ranks for d in topo.ranks)


def test_unknown_devices_and_links_are_user_errors() -> None:
    topo = small_cluster()
    net = Network(simpy.Environment(), topo)
    with pytest.raises(TrainsimError, match="no device 'h9/gpu0'"):
        net.route("h9/gpu0", "h0/gpu0")
    with pytest.raises(TrainsimError, match="not in the topology"):
        net.transfer("h0/gpu0", "h1/gpu0", 10, route=[("h0/gpu0", "h1/gpu0")])
    with pytest.raises(TrainsimError, match=">= 0 bytes"):
        net.transfer("h0/gpu0", "h1/gpu0", -1)
