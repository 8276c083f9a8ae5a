"""Flows on routes over shared links, with max-min fair rates (a fluid, processor-sharing model).

A link carries many flows at once. Whenever a flow starts or ends, every active flow's progress is
brought up to date and rates are recomputed by progressive filling (max-min fairness over all the
links each flow crosses), as Ciw's processor-sharing node and SimGrid's flow model do. Between
those instants nothing changes, so one timer (for the earliest completion) is all that is pending.

A flow's bytes are transmitted at its fair rate; its completion event fires once the last byte has
also crossed the route's latency (the sum of the links' latencies).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx
import simpy

from simcore.errors import TrainsimError
from simcore.topology import Topology

__all__ = ["Flow", "LinkStats", "Network"]

Edge = tuple[str, str]
_EPS = 1e-12


@dataclass(eq=False, slots=True)
class Flow:
    """Bytes moving from ``src`` to ``dst`` along ``route``; ``done`` fires on arrival."""

    id: int
    src: str
    dst: str
    route: tuple[Edge, ...]
    size_bytes: float
    remaining_bytes: float
    latency_s: float
    done: simpy.Event
    start_s: float
    tag: str = ""
    rate_Bps: float = 0.0
    end_s: float = float("nan")


@dataclass(slots=True)
class LinkStats:
    """What one directed link carried: bytes, time with at least one flow on it, peak flow count."""

    bytes: float = 0.0
    busy_s: float = 0.0
    max_flows: int = 0
    flows: int = field(default=0)


class Network:
    """All flows of one simulation over one topology."""

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        self._graph = topology.graph
        self._active: dict[int, Flow] = {}
        self._ids = itertools.count()
        self._last_update = 0.0
        self._generation = 0
        self._routes: dict[Edge, tuple[Edge, ...]] = {}
        self.stats: dict[Edge, LinkStats] = {}
        self.completed: list[Flow] = []
        self.keep_completed = False

    # --- routing ---------------------------------------------------------------------------
    def route(self, src: str, dst: str) -> tuple[Edge, ...]:
        """The lowest-latency path from ``src`` to ``dst`` as a tuple of directed edges (cached)."""
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        try:
            nodes = nx.shortest_path(self._graph, src, dst, weight="latency_s")
        except (nx.NetworkXNoPath, nx.NodeNotFound) as exc:
            raise TrainsimError(f"no route from {src!r} to {dst!r} in topology {self.topology.name!r}") from exc
        path = tuple(itertools.pairwise(nodes))
        self._routes[key] = path
        return path

    def route_latency(self, route: Sequence[Edge]) -> float:
        return float(sum(self._graph.edges[e]["latency_s"] for e in route))

    def route_bandwidth(self, route: Sequence[Edge]) -> float:
        return float(min((self._graph.edges[e]["bandwidth_Bps"] for e in route), default=float("inf")))

    # --- flows -----------------------------------------------------------------------------
    def transfer(self, src: str, dst: str, size_bytes: float, *, route: Sequence[Edge] | None = None,
                 tag: str = "") -> simpy.Event:
        """Start moving ``size_bytes`` from ``src`` to ``dst``; the returned event fires on arrival."""
        if size_bytes < 0:
            raise TrainsimError(f"transfer size must be >= 0, got {size_bytes}")
        path = tuple(route) if route is not None else self.route(src, dst)
        done = self.env.event()
        flow = Flow(next(self._ids), src, dst, path, float(size_bytes), float(size_bytes),
                    self.route_latency(path), done, float(self.env.now), tag)
        if src == dst or size_bytes == 0 or not path:
            self._finish(flow)
            return done
        self._advance()
        self._active[flow.id] = flow
        self._reschedule()
        return done

    @property
    def active_flows(self) -> int:
        return len(self._active)

    def _advance(self) -> None:
        """Bring every active flow's remaining bytes and link counters up to now."""
        now = float(self.env.now)
        dt = now - self._last_update
        if dt > 0 and self._active:
            busy: set[Edge] = set()
            for flow in self._active.values():
                moved = flow.rate_Bps * dt
                flow.remaining_bytes = max(0.0, flow.remaining_bytes - moved)
                for e in flow.route:
                    self._stat(e).bytes += moved
                    busy.add(e)
            for e in busy:
                self.stats[e].busy_s += dt
        self._last_update = now

    def _stat(self, edge: Edge) -> LinkStats:
        s = self.stats.get(edge)
        if s is None:
            s = self.stats[edge] = LinkStats()
        return s

    def _reschedule(self) -> None:
        """Recompute fair rates and arm one timer for the earliest completion."""
        self._generation += 1
        if not self._active:
            return
        self._assign_rates()
        first = min(self._active.values(), key=lambda f: (f.remaining_bytes / f.rate_Bps, f.id))
        delay = first.remaining_bytes / first.rate_Bps
        gen = self._generation
        timer = self.env.timeout(max(0.0, delay))
        timer.callbacks.append(lambda _ev: self._on_timer(gen))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start or end
        self._advance()
        finished = [f for f in self._active.values()
                    if f.remaining_bytes <= _EPS * max(1.0, f.size_bytes) or f.remaining_bytes / f.rate_Bps < 1e-15]
        for flow in finished:
            del self._active[flow.id]
            self._finish(flow)
        self._reschedule()

    def _finish(self, flow: Flow) -> None:
        flow.remaining_bytes = 0.0
        if self.keep_completed:
            self.completed.append(flow)
        if flow.latency_s > 0:
            self.env.timeout(flow.latency_s).callbacks.append(lambda _ev: self._arrive(flow))
        else:
            self._arrive(flow)

    def _arrive(self, flow: Flow) -> None:
        flow.end_s = float(self.env.now)
        flow.done.succeed(flow)

    def _assign_rates(self) -> None:
        """Progressive filling: raise all unfrozen flows' rates together until a link saturates."""
        graph = self._graph
        capacity: dict[Edge, float] = {}
        users: dict[Edge, list[Flow]] = {}
        for flow in self._active.values():
            for e in flow.route:
                if e not in capacity:
                    capacity[e] = float(graph.edges[e]["bandwidth_Bps"])
                    users[e] = []
                users[e].append(flow)
        for e, fl in users.items():
            s = self._stat(e)
            s.max_flows = max(s.max_flows, len(fl))
        unfrozen = {f.id for f in self._active.values()}
        active_count = {e: len(fl) for e, fl in users.items()}
        for f in self._active.values():
            f.rate_Bps = 0.0
        while unfrozen:
            share, bottleneck = min(((capacity[e] / n, e) for e, n in active_count.items() if n > 0))
            for e in active_count:
                if active_count[e] > 0:
                    capacity[e] -= share * active_count[e]
            saturated = [f for f in users[bottleneck] if f.id in unfrozen]
            for f in self._active.values():
                if f.id in unfrozen:
                    f.rate_Bps += share
            for f in saturated:
                unfrozen.discard(f.id)
                for e in f.route:
                    active_count[e] -= 1
            # Any other link that hit zero capacity freezes its flows as well.
            for e, n in list(active_count.items()):
                if n > 0 and capacity[e] <= _EPS * float(graph.edges[e]["bandwidth_Bps"]):
                    for f in users[e]:
                        if f.id in unfrozen:
                            unfrozen.discard(f.id)
                            for e2 in f.route:
                                active_count[e2] -= 1

    def utilisation(self, elapsed_s: float | None = None) -> dict[Edge, float]:
        """Bytes carried over (bandwidth x elapsed) per directed link."""
        self._advance()
        span = float(self.env.now) if elapsed_s is None else elapsed_s
        if span <= 0:
            return {e: 0.0 for e in self.stats}
        return {e: s.bytes / (float(self._graph.edges[e]["bandwidth_Bps"]) * span) for e, s in self.stats.items()}
