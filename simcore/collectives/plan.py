"""What a collective algorithm *is* to the simulator: phases of concurrent transfers plus latency.

An algorithm turns (topology, group, size) into a :class:`Plan`: a sequence of :class:`Phase`
objects run one after the other. A phase is a set of :class:`Transfer` flows that run concurrently
(one per ring hop, tree edge, ...), each carrying the *whole* phase's bytes over its hop, plus the
phase's latency term (its number of sequential steps times the per-step latency alpha).

The cost model is alpha-beta (Hockney; as in NCCL's tuning model, src/graph/tuning.cc):

    phase time = latency_s + max over links L of (bytes crossing L) / bandwidth(L)

where latency_s = steps * alpha and alpha = the slowest hop's route latency + a fixed per-step
software overhead (:data:`STEP_OVERHEAD_S`). The second term is the bandwidth time: when the
phase's flows all carry equal bytes and start together, max-min fair sharing finishes them exactly
when the most loaded link has drained, so this is also what the discrete-event run gives when
nothing competes. For a ring whose hops do not share links it reduces to the textbook
2(p-1)/p * S / B + 2(p-1) * alpha.
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from simcore.errors import TrainsimError
from simcore.topology import Topology

__all__ = [
    "STEP_OVERHEAD_S",
    "AlgorithmUnavailable",
    "Edge",
    "Move",
    "Phase",
    "Plan",
    "PlanContext",
    "Route",
    "Transfer",
    "concurrent",
    "describe_link",
    "edge_table",
    "merged_transfers",
    "rank_hosts",
    "route_latency",
    "step_alpha",
]

Edge = tuple[str, str]
Route = tuple[Edge, ...]

_EDGE_TABLES: weakref.WeakKeyDictionary[Topology, dict[Edge, tuple[float, float]]] = (
    weakref.WeakKeyDictionary()
)


def edge_table(topology: Topology) -> dict[Edge, tuple[float, float]]:
    """``(bandwidth_Bps, latency_s)`` of every directed link, read once per topology object."""
    table = _EDGE_TABLES.get(topology)
    if table is None:
        table = {
            (u, v): (float(a["bandwidth_Bps"]), float(a["latency_s"]))
            for u, v, a in topology.graph.edges(data=True)
        }
        _EDGE_TABLES[topology] = table
    return table


def route_latency(topology: Topology, route: Route) -> float:
    """Sum of the route's link latencies (s), in route order (as the network sums them)."""
    succ = topology.graph._succ  # raw adjacency: networkx's edge views cost a call per lookup
    return float(sum(succ[u][v]["latency_s"] for u, v in route))


# Per-step software cost (kernel loop, flag polling) added to every step's route latency. NCCL's
# tuning model adds a comparable per-hop hardware/software latency of about 0.6-1 us for NVLink and
# PCIe hops with the Simple protocol (src/graph/tuning.cc, hwLat); we take 1 us.
STEP_OVERHEAD_S = 1.0e-6


class AlgorithmUnavailable(TrainsimError):
    """The algorithm cannot run on this group/topology (e.g. NVLS without an NVLS switch)."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """One flow of a phase: ``size_bytes`` from device ``src`` to device ``dst`` along ``route``."""

    src: str
    dst: str
    size_bytes: float
    route: Route
    latency_s: float


@dataclass(frozen=True, slots=True)
class Phase:
    """Concurrent transfers plus the phase's latency term (``steps`` sequential steps of alpha).

    In per-step mode the phase runs as ``steps`` synchronised steps, each moving ``1/steps`` of
    every transfer's bytes and costing ``latency_s / steps``; in aggregate mode it is one round.
    """

    label: str
    transfers: tuple[Transfer, ...]
    latency_s: float
    steps: int

    def link_loads(self) -> dict[Edge, float]:
        """Bytes each directed link carries in this phase."""
        loads: dict[Edge, float] = {}
        load = loads.get
        for t in self.transfers:
            size = t.size_bytes
            for edge in t.route:
                loads[edge] = load(edge, 0.0) + size
        return loads


@dataclass(frozen=True, slots=True)
class Plan:
    """A collective algorithm laid out on one topology: its phases, run one after another."""

    op: str
    algorithm: str
    size_bytes: float
    group: tuple[int, ...]
    phases: tuple[Phase, ...]

    @property
    def transfer_count(self) -> int:
        return sum(len(p.transfers) for p in self.phases)


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What an algorithm builder needs: the topology, a router, and the group's devices."""

    topology: Topology
    route: Callable[[str, str], Route]
    group: tuple[int, ...]
    root: int = -1
    servers: tuple[int, ...] = ()

    def device(self, rank: int) -> str:
        return self.topology.ranks[rank]

    def transfer(self, src: str, dst: str, size_bytes: float, via: tuple[str, ...] = ()) -> Transfer:
        """A transfer on the routed path from ``src`` to ``dst``, through the ``via`` nodes in order."""
        route = self.path(src, dst, via)
        return Transfer(src, dst, float(size_bytes), route, route_latency(self.topology, route))

    def path(self, src: str, dst: str, via: tuple[str, ...] = ()) -> Route:
        """The routed path from ``src`` to ``dst`` through the ``via`` nodes in order."""
        route: Route = ()
        last = src
        for node in (*via, dst):
            if node != last:
                route += self.route(last, node)
                last = node
        return route

    def hosts_in_order(self, ranks: Sequence[int]) -> list[list[int]]:
        """``ranks`` split by host, hosts in order of first appearance, rank order kept inside."""
        by_host: dict[int, list[int]] = {}
        for r, host in zip(ranks, rank_hosts(self.topology, ranks), strict=True):
            by_host.setdefault(host, []).append(r)
        return list(by_host.values())


def rank_hosts(topology: Topology, ranks: Iterable[int]) -> list[int]:
    """The host of each rank (``Topology.host_of_rank`` for many ranks at once)."""
    nodes = topology.graph._node  # raw node attributes: the public view costs a call per lookup
    devices = topology.ranks
    return [int(nodes[devices[r]]["host"]) for r in ranks]


Move = tuple[str, str, tuple[str, ...], float]


def merged_transfers(ctx: PlanContext, moves: Iterable[Move]) -> tuple[Transfer, ...]:
    """Transfers for ``(src, dst, via, bytes)`` moves; repeats of one path share a flow when safe.

    Several channels of one algorithm often use the same hop. Their moves become one flow
    carrying the sum only when no other path touches any link of that hop: then one flow at the
    whole capacity equals k fair-sharing flows, so max-min fairness (and hence the time) is
    unchanged, while the flow count follows the links used, not the channel count. Otherwise
    each move stays its own flow.
    """
    sizes: dict[tuple[str, str, tuple[str, ...]], list[float]] = {}
    repeated = False
    for src, dst, via, size in moves:
        key = (src, dst, via)
        known = sizes.get(key)
        if known is None:
            sizes[key] = [size]
        else:
            known.append(size)
            repeated = True
    routes = [ctx.path(*key) for key in sizes]
    # Only a path with several moves needs to know whether other paths share its links.
    users = Counter(itertools.chain.from_iterable(routes)) if repeated else Counter()
    topology = ctx.topology
    out: list[Transfer] = []
    for (src, dst, _), route, moved in zip(sizes, routes, sizes.values(), strict=True):
        latency = route_latency(topology, route)
        if len(moved) == 1 or all(users[e] == 1 for e in route):
            out.append(Transfer(src, dst, sum(moved), route, latency))
        else:
            out.extend(Transfer(src, dst, size, route, latency) for size in moved)
    return tuple(out)


def step_alpha(transfers: Iterable[Transfer]) -> float:
    """alpha for one step: the slowest hop's route latency plus the software overhead."""
    return max((t.latency_s for t in transfers), default=0.0) + STEP_OVERHEAD_S


def concurrent(label: str, phases: Sequence[Phase]) -> Phase:
    """Phases that run side by side (e.g. one ring per host) merged into one phase."""
    if not phases:
        raise TrainsimError(f"phase {label!r} has nothing to run")
    transfers = tuple(t for p in phases for t in p.transfers)
    return Phase(label, transfers, max(p.latency_s for p in phases), max(p.steps for p in phases))


def describe_link(topology: Topology, edge: Edge | None) -> str:
    """``"h0/gpu0->h0/nvswitch (nvswitch, 300.0 GB/s)"``; ``"none"`` when nothing moved."""
    if edge is None:
        return "none"
    attrs = topology.graph.edges[edge]
    return f"{edge[0]}->{edge[1]} ({attrs['kind']}, {float(attrs['bandwidth_Bps']) / 1e9:.1f} GB/s)"
