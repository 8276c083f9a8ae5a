"""What a collective algorithm *is* to the simulator: phases of concurrent transfers plus latency.

An algorithm turns (topology, group) into a :class:`Plan`: a sequence of :class:`Phase` objects run
one after the other. A phase is a set of :class:`Transfer` flows that run concurrently (one per ring
hop, tree edge, ...), each carrying the *whole* phase's bytes over its hop, plus the phase's latency
structure (:class:`Hops`: how many intra-node and node-crossing hop latencies lie on its critical
path, in NCCL's terms).

Builders lay an algorithm out for a *unit* collective (one byte); the cost model
(:mod:`simcore.collectives.cost`) prices it for a size and protocol, and :func:`materialize` turns it
into the plan the discrete-event runner executes: transfer bytes scaled by size / protocol
efficiency, the phase's latency and its protocol throughput floor filled in. Where nothing competes
the phase lasts

    latency_s + max(max over links L of bytes(L) / usable bandwidth(L), engine_s)

which is also what the discrete-event run gives: its flows share links in proportion to their
bytes (weighted max-min fairness), so they all finish when the most loaded link has drained.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from simcore.errors import TrainsimError
from simcore.net.achievable import shm_efficiency
from simcore.topology import Topology, effective_bandwidth

__all__ = [
    "FABRIC_KINDS",
    "STEP_OVERHEAD_S",
    "AlgorithmUnavailable",
    "Edge",
    "Hops",
    "Move",
    "Phase",
    "Plan",
    "PlanContext",
    "Route",
    "Transfer",
    "concurrent",
    "edge_table",
    "hops_for",
    "merged_transfers",
    "rank_hosts",
    "route_latency",
]

Edge = tuple[str, str]
Route = tuple[Edge, ...]

# Link kinds that join servers: a route's latency on them is the fabric's part of a network hop.
FABRIC_KINDS = frozenset({"ib", "roce", "efa", "ethernet"})
_NVLINK_KINDS = frozenset({"nvlink", "nvswitch"})

# Per-step software cost of a CPU (gloo) collective step, added to the slowest hop's route latency:
# gloo's per-message overhead is a few microseconds; calibration (calibrate.collectives) replaces it.
STEP_OVERHEAD_S = 1.0e-6


def edge_table(topology: Topology) -> dict[Edge, tuple[float, float]]:
    """``(usable bandwidth_Bps, latency_s)`` of every directed link, read once per topology object."""
    return topology.derived(
        "edge_table",
        lambda: {
            (u, v): (effective_bandwidth(a), float(a["latency_s"]))
            for u, v, a in topology.graph.edges(data=True)
        },
    )


def route_latency(topology: Topology, route: Route) -> float:
    """Sum of the route's link latencies (s), in route order (as the network sums them)."""
    succ = topology.graph._succ  # raw adjacency: networkx's edge views cost a call per lookup
    return float(sum(succ[u][v]["latency_s"] for u, v in route))


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
class Hops:
    """A phase's latency structure, as NCCL's tuning model counts it (protocol-independent).

    ``intra`` and ``inter`` are the numbers of intra-node and node-crossing hop latencies on the
    critical path (a ring all-reduce: 2(p-1) steps of which 2(n-1) cross nodes; a tree: twice the
    chain length and twice the tree depth). ``pattern`` names the row of the latency tables.
    ``nvlink``: every intra-node hop is NVLink (NCCL's NVLINK class, else PCI). ``shm``: intra-node
    hops are staged through host memory and pay their route latency on top. ``fabric_s`` is the
    fabric part (NIC to NIC) of the slowest node-crossing route; ``route_s`` the slowest route's
    whole latency (the CPU backend's per-step alpha). ``extra_s`` is a pattern's fixed term.
    """

    pattern: str
    intra: float
    inter: float
    nvlink: bool = True
    shm: bool = False
    intra_route_s: float = 0.0
    fabric_s: float = 0.0
    route_s: float = 0.0
    extra_s: float = 0.0

    @property
    def steps(self) -> float:
        return self.intra + self.inter


@dataclass(frozen=True, slots=True)
class Phase:
    """Concurrent transfers plus the phase's latency term.

    ``hops`` is the latency structure; ``latency_s`` and ``engine_s`` (the protocol's throughput
    floor on the bandwidth part) are filled in by :func:`materialize`, ``stage_s_per_byte`` when a
    unit plan is priced. In per-step mode the phase
    runs as ``steps`` synchronised steps, each moving ``1/steps`` of every transfer's bytes and
    costing ``1/steps`` of its latency and floor; in aggregate mode it is one round.
    """

    label: str
    transfers: tuple[Transfer, ...]
    hops: Hops
    steps: int = 1
    latency_s: float = 0.0
    engine_s: float = 0.0
    # Unit plans: seconds per byte on the slowest intra-node and fabric link the phase uses, which
    # the pipeline fill (simcore.collectives.pipeline) prices its stages by.
    stage_s_per_byte: tuple[float, float] = (0.0, 0.0)

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
    """A collective algorithm laid out on one topology: its phases, run one after another.

    ``protocol`` is empty for a unit plan (one byte, no protocol) and names NCCL's protocol
    (``LL``, ``LL128``, ``Simple``) in a materialized plan.
    """

    op: str
    algorithm: str
    size_bytes: float
    group: tuple[int, ...]
    phases: tuple[Phase, ...]
    protocol: str = ""

    @property
    def transfer_count(self) -> int:
        return sum(len(p.transfers) for p in self.phases)


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What an algorithm builder needs: the topology, a router, and the group's devices.

    ``splits`` (all_to_allv only) holds the bytes rank ``group[i]`` sends to ``group[j]`` for a
    unit collective.
    """

    topology: Topology
    route: Callable[[str, str], Route]
    group: tuple[int, ...]
    root: int = -1
    servers: tuple[int, ...] = ()
    splits: tuple[tuple[float, ...], ...] = ()

    def device(self, rank: int) -> str:
        return self.topology.ranks[rank]

    def transfer(self, src: str, dst: str, size_bytes: float, via: tuple[str, ...] = ()) -> Transfer:
        """A transfer from ``src`` to ``dst`` through the ``via`` nodes; bytes as carried on the wire."""
        route, factor = self.hop(src, dst, via)
        return Transfer(src, dst, float(size_bytes) * factor, route, route_latency(self.topology, route))

    def hop(self, src: str, dst: str, via: tuple[str, ...] = ()) -> tuple[Route, float]:
        """The routed path and the wire bytes per payload byte (> 1 when staged through host memory).

        GPUs of a server without peer-to-peer (node attribute ``p2p: False``) that are not joined
        by NVLink exchange data through pinned host memory (NCCL's SHM transport): the route runs
        through the sender's nearest CPU, and only :func:`shm_efficiency` of the rate is payload.
        """
        if not via and self.staged(src, dst):
            return self.path(src, dst, (self.nearest_cpu(src),)), 1.0 / shm_efficiency()
        return self.path(src, dst, via), 1.0

    def staged(self, src: str, dst: str) -> bool:
        """Whether GPU-to-GPU traffic from ``src`` to ``dst`` goes through host memory (SHM)."""
        nodes = self.topology.graph._node
        a, b = nodes[src], nodes[dst]
        if a.get("p2p", True) and b.get("p2p", True):
            return False
        if a.get("kind") != "gpu" or b.get("kind") != "gpu" or a.get("host") != b.get("host"):
            return False
        succ = self.topology.graph._succ
        return not all(succ[u][v]["kind"] in _NVLINK_KINDS for u, v in self.route(src, dst))

    def nearest_cpu(self, device: str) -> str:
        """The CPU (host memory) nearest ``device`` on its server, by route latency."""
        known: dict[str, str] = self.topology.derived("nearest_cpu", dict)
        cpu = known.get(device)
        if cpu is None:
            nodes = self.topology.graph.nodes
            host = nodes[device].get("host")
            cpus = sorted(n for n, a in nodes(data=True) if a.get("kind") == "cpu" and a.get("host") == host)
            if not cpus:
                raise AlgorithmUnavailable(f"{device} has no CPU on its host to stage traffic through")
            cpu = known[device] = min(cpus, key=lambda c: route_latency(self.topology, self.route(device, c)))
        return cpu

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

    def host(self, device: str) -> int:
        return int(self.topology.graph._node[device]["host"])


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
    whole capacity equals k fair-sharing flows, so the time is unchanged, while the flow count
    follows the links used, not the channel count. Otherwise each move stays its own flow.
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
    hops = [ctx.hop(*key) for key in sizes]
    # Only a path with several moves needs to know whether other paths share its links.
    users = Counter(itertools.chain.from_iterable(r for r, _ in hops)) if repeated else Counter()
    topology = ctx.topology
    out: list[Transfer] = []
    for (src, dst, _), (route, factor), moved in zip(sizes, hops, sizes.values(), strict=True):
        latency = route_latency(topology, route)
        if len(moved) == 1 or all(users[e] == 1 for e in route):
            out.append(Transfer(src, dst, sum(moved) * factor, route, latency))
        else:
            out.extend(Transfer(src, dst, size * factor, route, latency) for size in moved)
    return tuple(out)


def hops_for(
    ctx: PlanContext,
    pattern: str,
    transfers: Sequence[Transfer],
    intra: float,
    inter: float,
    extra_s: float = 0.0,
) -> Hops:
    """The latency structure of ``transfers`` laid out as ``pattern`` (counts given by the builder).

    Reads the hop classes off the routes: whether every intra-node hop is NVLink, whether any is
    staged through host memory, the slowest intra-node route, and the fabric part of the slowest
    node-crossing route.
    """
    succ = ctx.topology.graph._succ
    nodes = ctx.topology.graph._node
    nvlink, shm = True, False
    intra_s = fabric_s = route_s = 0.0
    for t in transfers:
        route_s = max(route_s, t.latency_s)
        src_host = nodes[t.src].get("host", -1)
        if src_host == nodes[t.dst].get("host", -1) and src_host >= 0:
            if {nodes[t.src].get("kind"), nodes[t.dst].get("kind")} - {"gpu", "cpu"}:
                continue  # a leg to a switch or NIC (NVLS, a rail), not a hop between ranks
            kinds = {succ[u][v]["kind"] for u, v in t.route}
            nvlink = nvlink and kinds <= _NVLINK_KINDS
            shm = shm or ctx.staged(t.src, t.dst)
            intra_s = max(intra_s, t.latency_s)
        else:
            fabric = sum(succ[u][v]["latency_s"] for u, v in t.route if succ[u][v]["kind"] in FABRIC_KINDS)
            fabric_s = max(fabric_s, float(fabric))
    return Hops(pattern, float(intra), float(inter), nvlink, shm, intra_s, fabric_s, route_s, extra_s)


def concurrent(label: str, phases: Sequence[Phase]) -> Phase:
    """Phases that run side by side (e.g. one ring per host) merged into one phase."""
    if not phases:
        raise TrainsimError(f"phase {label!r} has nothing to run")
    transfers = tuple(t for p in phases for t in p.transfers)
    worst = max(phases, key=lambda p: (p.hops.inter, p.hops.intra, p.hops.route_s))
    hops = replace(
        worst.hops,
        nvlink=all(p.hops.nvlink for p in phases),
        shm=any(p.hops.shm for p in phases),
        intra_route_s=max(p.hops.intra_route_s for p in phases),
        fabric_s=max(p.hops.fabric_s for p in phases),
        route_s=max(p.hops.route_s for p in phases),
    )
    return Phase(label, transfers, hops, max(p.steps for p in phases))


def empty_phase(label: str, pattern: str) -> Phase:
    """A phase that moves nothing and costs nothing (a group of one rank)."""
    return Phase(label, (), Hops(pattern, 0.0, 0.0))
