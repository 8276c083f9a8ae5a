"""The cluster graph every part of trainsim shares: devices as nodes, directed links as edges.

Contract (topologies/ builds it, simcore reads it):

- Nodes are strings. Devices inside a server are named ``"h{host}/{local}"`` (``"h0/gpu3"``,
  ``"h0/nvswitch"``, ``"h0/nic3"``, ``"h0/cpu0"``, ``"h0/pcie0"``); fabric switches have no host
  prefix (``"leaf0"``, ``"spine1"``). Node attributes: ``kind`` (one of :data:`NODE_KINDS`),
  ``host`` (int, -1 for fabric), ``host_type`` (preset name of the server, e.g. ``"dgx-a100"``;
  ``""`` for fabric), ``gpu`` (GPU spec name, GPUs only), ``in_network_reduction`` (``"nvls"``,
  ``"sharp"`` or ``""``, switches only).
- Edges are directed; a full-duplex physical link is two edges. Edge attributes:
  ``bandwidth_Bps`` (>0, the datasheet rate per direction), ``latency_s`` (>=0), ``kind`` (one of
  :data:`LINK_KINDS`), optional ``efficiency`` (0 < e <= 1, default 1: the fraction of the rate
  software reaches, see :func:`effective_bandwidth`).
- ``ranks`` lists GPU (or CPU, for CPU clusters) node names in rank order: rank r runs on
  ``ranks[r]``; ranks fill hosts in order (rank = host * gpus_per_host + local index).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from simcore.digraph import DiGraph
from simcore.errors import TrainsimError

# The graph is a simcore.digraph.DiGraph (what the topology builders make) or a networkx.DiGraph
# (the same dicts and API, as tests build by hand): networkx itself is imported only where one of
# its graph algorithms runs (see simcore.digraph).

__all__ = [
    "LINK_KINDS",
    "NODE_KINDS",
    "ClusterLoader",
    "Link",
    "Topology",
    "TopologyError",
    "effective_bandwidth",
]

NODE_KINDS = ("gpu", "cpu", "nic", "switch", "pcie")
_T = TypeVar("_T")

LINK_KINDS = ("nvlink", "nvswitch", "pcie", "ib", "roce", "efa", "ethernet", "smp", "loopback", "memory")


def effective_bandwidth(attrs: Mapping[str, Any]) -> float:
    """A link's usable rate (B/s): its datasheet ``bandwidth_Bps`` times its ``efficiency`` (default 1).

    Topology builders stamp ``efficiency`` from the achievable-bandwidth table
    (``simcore/data/links.yaml``); the network and the collective closed forms both use this rate.
    """
    return float(attrs["bandwidth_Bps"]) * float(attrs.get("efficiency", 1.0))


class TopologyError(TrainsimError):
    """A topology that cannot be simulated: disconnected, zero bandwidth, unknown kinds."""


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a physical link."""

    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    kind: str


@dataclass(eq=False)
class Topology:
    """A validated cluster graph plus the rank-to-device map."""

    name: str
    graph: DiGraph
    ranks: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    # What the simulator derives from this graph once (routes, link numbering, collective plans),
    # kept with the topology and gone with it: owned by whoever holds the topology, not by a module.
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without what was derived (a process that unpickles it derives its own)."""
        return {**self.__dict__, "_derived": {}}

    def derived(self, name: str, make: Callable[[], _T]) -> _T:
        """The value ``make()`` builds from this topology's graph, built on the first call for
        ``name``; later calls return that object while ``graph`` is the same object (a topology whose
        graph is replaced derives everything afresh)."""
        known = self._derived.get(name)
        if known is not None and known[0] is self.graph:
            return known[1]
        value = make()
        self._derived[name] = (self.graph, value)
        return value

    # --- structure -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def node(self, name: str) -> dict[str, Any]:
        return self.graph.nodes[name]

    def host_of_rank(self, rank: int) -> int:
        return int(self.graph.nodes[self.ranks[rank]]["host"])

    @property
    def hosts(self) -> list[int]:
        return sorted({self.host_of_rank(r) for r in range(self.world_size)})

    def ranks_on_host(self, host: int) -> list[int]:
        return [r for r in range(self.world_size) if self.host_of_rank(r) == host]

    def gpu_spec_name(self, rank: int) -> str:
        return str(self.graph.nodes[self.ranks[rank]].get("gpu", ""))

    def link(self, src: str, dst: str) -> Link:
        attrs = self.graph.edges[src, dst]
        return Link(src, dst, float(attrs["bandwidth_Bps"]), float(attrs["latency_s"]), str(attrs["kind"]))

    def links(self) -> Iterable[Link]:
        for src, dst in self.graph.edges:
            yield self.link(src, dst)

    def in_network_reduction(self, kind: str) -> bool:
        """Whether any switch offers ``kind`` ("nvls" or "sharp") reduction."""
        return any(a.get("in_network_reduction") == kind for _, a in self.graph.nodes(data=True))

    def subset(self, ranks: Sequence[int], name: str | None = None) -> Topology:
        """The same graph with only ``ranks`` placed (e.g. the first N GPUs of a preset)."""
        return Topology(name or self.name, self.graph, [self.ranks[r] for r in ranks], dict(self.metadata))

    # --- checks ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`TopologyError` naming the first thing that makes the graph unusable."""
        g = self.graph
        if g.number_of_nodes() == 0:
            raise TopologyError(f"topology {self.name!r} has no devices")
        for n, attrs in g.nodes(data=True):
            if attrs.get("kind") not in NODE_KINDS:
                raise TopologyError(
                    f"topology {self.name!r}: node {n!r} has kind {attrs.get('kind')!r}; "
                    f"allowed: {', '.join(NODE_KINDS)}"
                )
        for u, v, attrs in g.edges(data=True):
            bw = attrs.get("bandwidth_Bps")
            lat = attrs.get("latency_s")
            if not isinstance(bw, (int, float)) or not bw > 0:
                raise TopologyError(
                    f"topology {self.name!r}: link {u} -> {v} has bandwidth {bw!r}; it must be > 0"
                )
            if not isinstance(lat, (int, float)) or lat < 0:
                raise TopologyError(
                    f"topology {self.name!r}: link {u} -> {v} has latency {lat!r}; it must be >= 0"
                )
            eff = attrs.get("efficiency", 1.0)
            if not isinstance(eff, (int, float)) or not 0 < eff <= 1:
                raise TopologyError(
                    f"topology {self.name!r}: link {u} -> {v} has efficiency {eff!r}; it must be in (0, 1]"
                )
            if attrs.get("kind") not in LINK_KINDS:
                raise TopologyError(
                    f"topology {self.name!r}: link {u} -> {v} has kind {attrs.get('kind')!r}; "
                    f"allowed: {', '.join(LINK_KINDS)}"
                )
        if not self.ranks:
            raise TopologyError(f"topology {self.name!r} places no ranks (no GPUs)")
        for r in self.ranks:
            if r not in g:
                raise TopologyError(f"topology {self.name!r}: rank device {r!r} is not in the graph")
        if len(set(self.ranks)) != len(self.ranks):
            raise TopologyError(f"topology {self.name!r}: a device is listed twice in ranks")
        for u, v in g.edges:
            if not g.has_edge(v, u):
                raise TopologyError(
                    f"topology {self.name!r}: link {u} -> {v} has no reverse direction; "
                    "every link needs both directions"
                )
        comp = _reachable(g, self.ranks[0])
        missing = [r for r in self.ranks if r not in comp]
        if missing:
            raise TopologyError(
                f"topology {self.name!r} is disconnected: {missing[0]!r} cannot reach {self.ranks[0]!r}"
            )


def _reachable(graph: DiGraph, start: str) -> set[str]:
    """The nodes joined to ``start`` by links in either direction (its weakly connected component,
    networkx's ``node_connected_component`` of the undirected view, by a plain search)."""
    succ, pred = graph._succ, graph._pred
    seen = {start}
    todo = [start]
    while todo:
        node = todo.pop()
        for nbr in itertools.chain(succ[node], pred[node]):
            if nbr not in seen:
                seen.add(nbr)
                todo.append(nbr)
    return seen


class ClusterLoader(Protocol):
    """Builds a cluster by name: the first ``gpus`` ranks (adding servers as needed), ``nodes``
    servers, or the cluster as its file gives it when neither is set.

    simcore reads no cluster files: what runs clusters by name (the what-if, a parameter-server run
    with dedicated server nodes) is handed a loader, ``topologies.load_cluster`` in practice.
    """

    def __call__(self, name: str, /, *, gpus: int | None = None, nodes: int | None = None) -> Topology: ...
