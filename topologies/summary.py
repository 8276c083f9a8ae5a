"""What a topology offers, in numbers: devices, link classes, injection and bisection bandwidth.

Bisection bandwidth is computed exactly as the minimum cut (max flow, one direction) separating the
first half of the ranks from the second half, with every directed link's bandwidth as capacity.
It counts every physical path, PCIe and SMP included, so it is an upper bound on what collectives
reach. Injection bandwidth is the max flow from a host's ranks into the fabric switches next to it:
for one rank alone (not transiting other GPUs) and per rank when all of the host's ranks send.

The NVLink domain is the largest set of ranks joined by NVLink-class links (``nvlink``, ``nvswitch``:
NVLink, NVSwitch, and the xGMI mesh of AMD parts) through GPUs and switches only, never a CPU or
PCIe; its per-GPU bandwidth is what rank 0's own such links to GPUs and switches carry (NVLink-C2C
to a Grace CPU does not count).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.topology import NODE_KINDS, Topology

# networkx: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "LinkClassSummary",
    "TopologySummary",
    "bisection_bandwidth",
    "injection_bandwidth",
    "nvlink_domain",
    "summarise",
]

_SOURCE, _SINK = "__source__", "__sink__"
_NVLINK_KINDS = ("nvlink", "nvswitch")
_PEER_KINDS = ("gpu", "switch")


@dataclass(frozen=True, slots=True)
class LinkClassSummary:
    """All full-duplex links of one class; ``bandwidth_Bps`` is per direction."""

    name: str
    kind: str
    count: int
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class TopologySummary:
    name: str
    preset: str
    ranks: int
    hosts: int
    rank_devices: dict[str, int]
    devices: dict[str, int]
    link_classes: tuple[LinkClassSummary, ...]
    fabric: str
    oversubscription: float
    injection_one_Bps: float
    injection_each_Bps: float
    bisection_Bps: float
    in_network_reduction: dict[str, int]
    nvlink_domain_ranks: int = 0  # most ranks joined by NVLink-class links (1: no GPU peer links)
    nvlink_per_gpu_Bps: float = 0.0  # rank 0's NVLink-class bandwidth to GPUs and switches, per direction
    nics_per_host: int = 0  # NICs on host 0


def _capacity_graph(topo: Topology, nodes: set[str] | None = None) -> nx.DiGraph:
    import networkx as nx

    flow = nx.DiGraph()
    for u, v, attrs in topo.graph.edges(data=True):
        if nodes is None or (u in nodes and v in nodes):
            flow.add_edge(u, v, capacity=float(attrs["bandwidth_Bps"]))
    return flow


def _max_flow(flow: nx.DiGraph, sources: list[str], sinks: list[str]) -> float:
    import networkx as nx

    if not sources or not sinks:
        return 0.0
    for s in sources:
        flow.add_edge(_SOURCE, s)  # no capacity attribute: unbounded
    for t in sinks:
        flow.add_edge(t, _SINK)
    return float(nx.maximum_flow_value(flow, _SOURCE, _SINK))


def bisection_bandwidth(topo: Topology) -> float:
    """Min cut (B/s, one direction) between ranks [0, n/2) and [n/2, n); 0 for a single rank."""
    half = topo.world_size // 2
    if half == 0:
        return 0.0
    return _max_flow(_capacity_graph(topo), topo.ranks[:half], topo.ranks[half : 2 * half])


def injection_bandwidth(topo: Topology, host: int = 0) -> tuple[float, float]:
    """(one rank alone, each rank when all of ``host``'s ranks send) into the fabric, in B/s."""
    local = {n for n, a in topo.graph.nodes(data=True) if a.get("host") == host}
    fabric = {v for u in local for v in topo.graph.successors(u) if topo.graph.nodes[v].get("host") == -1}
    ranks = [topo.ranks[r] for r in topo.ranks_on_host(host)]
    if not fabric or not ranks:
        return 0.0, 0.0
    others = {r for r in ranks[1:]}  # a lone rank's traffic does not transit other GPUs
    one = _max_flow(_capacity_graph(topo, (local - others) | fabric), ranks[:1], sorted(fabric))
    everyone = _max_flow(_capacity_graph(topo, local | fabric), ranks, sorted(fabric))
    return one, everyone / len(ranks)


def nvlink_domain(topo: Topology) -> tuple[int, float]:
    """(most ranks in one NVLink domain, rank 0's NVLink-class bandwidth per direction in B/s)."""
    import networkx as nx

    nodes = topo.graph.nodes
    links = nx.Graph()
    links.add_nodes_from(topo.ranks)
    for u, v, a in topo.graph.edges(data=True):
        if a["kind"] in _NVLINK_KINDS and nodes[u]["kind"] in _PEER_KINDS and nodes[v]["kind"] in _PEER_KINDS:
            links.add_edge(u, v)
    ranks = set(topo.ranks)
    domain = max(len(ranks & component) for component in nx.connected_components(links))
    first = topo.ranks[0]
    per_gpu = sum(
        float(a["bandwidth_Bps"])
        for _, v, a in topo.graph.out_edges(first, data=True)
        if a["kind"] in _NVLINK_KINDS and nodes[v]["kind"] in _PEER_KINDS
    )
    return domain, per_gpu


def _link_classes(topo: Topology) -> tuple[LinkClassSummary, ...]:
    counts: Counter[tuple[str, str, float, float]] = Counter()
    for _, _, a in topo.graph.edges(data=True):
        counts[
            str(a.get("link_class", a["kind"])),
            str(a["kind"]),
            float(a["bandwidth_Bps"]),
            float(a["latency_s"]),
        ] += 1
    rows = [LinkClassSummary(name, kind, n // 2, bw, lat) for (name, kind, bw, lat), n in counts.items()]
    return tuple(sorted(rows, key=lambda r: (-r.bandwidth_Bps, r.name, r.latency_s)))


def summarise(topo: Topology) -> TopologySummary:
    """Every figure ``python -m topologies.show`` prints."""
    nodes = topo.graph.nodes
    kinds = Counter(str(a["kind"]) for _, a in nodes(data=True))
    reductions = Counter(
        str(a["in_network_reduction"]) for _, a in nodes(data=True) if a.get("in_network_reduction")
    )
    one, each = injection_bandwidth(topo)
    domain, per_gpu = nvlink_domain(topo)
    return TopologySummary(
        name=topo.name,
        preset=str(topo.metadata.get("preset", "")),
        ranks=topo.world_size,
        hosts=len(topo.hosts),
        rank_devices=dict(sorted(Counter(topo.gpu_spec_name(r) for r in range(topo.world_size)).items())),
        devices={k: kinds[k] for k in NODE_KINDS if kinds[k]},
        link_classes=_link_classes(topo),
        fabric=str(topo.metadata.get("fabric", "")),
        oversubscription=float(topo.metadata.get("oversubscription", 1.0)),
        injection_one_Bps=one,
        injection_each_Bps=each,
        bisection_Bps=bisection_bandwidth(topo),
        in_network_reduction=dict(sorted(reductions.items())),
        nvlink_domain_ranks=domain,
        nvlink_per_gpu_Bps=per_gpu,
        nics_per_host=sum(1 for _, a in nodes(data=True) if a["kind"] == "nic" and a.get("host") == 0),
    )
