"""Flows on routes over shared links, with max-min fair rates (a fluid, processor-sharing model).

A link carries many flows at once. Whenever flows start or end, every active flow's progress is
brought up to date and rates are recomputed by progressive filling (max-min fairness over all the
links each flow crosses, :mod:`simcore.net.fairshare`), as Ciw's processor-sharing node and SimGrid's
flow model do. Between those instants nothing changes, so one timer (for the earliest completion)
is all that is pending.

Batching: flows started at one simulated instant share one recomputation, which runs after every
other event of that instant (a late-priority SimPy event); flows that finish within a relative
:data:`FINISH_TOLERANCE` of each other end together, in one pass. A 4096-flow ring therefore costs
a handful of recomputations, not thousands.

Cost (measured on a parameter-server what-if, Llama-2-7B, 64 workers, 8 shards, 2 steps on
dgx-a100: 11,600 recomputations, about 330 active flows over 2,600 (flow, link) pairs, one
connected component, 9.5 distinct rate levels each): the time goes to the number of
recomputations (one per flow start or end that is not simultaneous with another: 97% of them
start or end a single flow, so flows of symmetric workers seldom start together and classes of
identical flows would not shrink the count), each a few dozen numpy calls of a few microseconds.
What did not help at these sizes, with the same results: fixing every link that is a local
bottleneck in one pass (2 passes instead of 5.5, but each dearer), a dense route matrix, dropping
links whose flows always also cross a narrower link (a NIC's PCIe side: 26% of the pairs,
bit-identical rates; 63% would be dominated in the active set), memoising rates by the set of
routes (30% hits), a fill that touches only the entries of the links it saturates and the flows it
fixes (twice the numpy calls a pass: 2.5x slower). What helps: a change cannot alter the passes of
the filling before the first one it reaches (:class:`simcore.net.fairshare.MaxMinState`), so a
recomputation resumes there, with the same floats: 46% fewer passes, 14% less time per simulation
at 64 workers (below 1,024 pairs a fresh solve is cheaper and is used). Fewer recomputations would
need coarser batching of ends, which changes results.

A flow's bytes are transmitted at its fair rate; its completion event fires once the last byte has
also crossed the route's latency (the sum of the links' latencies). Routes are the lowest-latency
paths of :class:`simcore.net.routing.Router` unless the caller gives one explicitly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from simcore.errors import TrainsimError
from simcore.net.fairshare import MaxMinState
from simcore.net.linkstats import LinkClassSummary, LinkIndex, LinkStats, LinkStatsView, LinkTable, link_name
from simcore.net.routing import Edge, Router
from simcore.topology import Topology, effective_bandwidth

# numpy, simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    import simpy
    from numpy.typing import NDArray
    from simpy.events import EventPriority

__all__ = [
    "FINISH_TOLERANCE",
    "Edge",
    "Flow",
    "LinkClassSummary",
    "LinkIndex",
    "LinkStats",
    "LinkStatsView",
    "LinkTable",
    "Network",
    "link_name",
]

# Flows whose remaining transmission times differ by less than this fraction finish together.
FINISH_TOLERANCE = 1e-9
# simpy's EventPriority (an int): after URGENT (0) and NORMAL (1) events of the same instant.
_LATE = cast("EventPriority", 2)


@dataclass(eq=False, slots=True)
class Flow:
    """Bytes moving from ``src`` to ``dst`` along ``route``; ``done`` fires on arrival.

    ``sent_s`` is when the last byte left the source (the flow occupied its links from ``start_s``
    to ``sent_s``); ``end_s`` is when it arrived (``sent_s`` plus the route latency). The network
    keeps a running flow's progress in arrays; ``rate_Bps`` (the fair rate of its last interval)
    and ``remaining_bytes`` (0) are filled in when it finishes.
    """

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
    weight: float = 1.0  # share of a contended link relative to a plain flow (weighted max-min)
    rate_Bps: float = 0.0
    end_s: float = float("nan")
    sent_s: float = float("nan")
    link_ids: NDArray[np.intp] | None = None  # indices into the network's link table (internal)
    simple: bool = True  # the route crosses no link twice (routed paths never do; internal)


class _ActiveFlows:
    """The flows in progress as arrays (slot i is ``flows[i]``); rates hold between recomputations.

    Kept from one recomputation to the next: finished slots are dropped and new flows appended
    with array operations, so a recomputation costs Python work only for the flows that changed.
    """

    def __init__(self) -> None:
        import numpy as np

        self.flows: list[Flow] = []
        self.size = np.zeros(0)
        self.weight = np.zeros(0)
        self.remaining = np.zeros(0)
        self.rates = np.zeros(0)
        self.alive = np.zeros(0, dtype=bool)
        self.entry_link = np.zeros(0, dtype=np.intp)  # (entry_link[i], entry_flow[i]): a flow crosses a link
        self.entry_flow = np.zeros(0, dtype=np.intp)
        self.links = np.zeros(0, dtype=np.intp)  # links carrying at least one flow, with counts and load
        self.counts = np.zeros(0, dtype=np.intp)
        self.load = np.zeros(0)
        self.solver: MaxMinState | None = None
        self.solver_unweighted = True
        self.weighted_flows = 0  # flows whose weight is not 1 (the network counts the finished out)

    def rebuild(self, new_flows: list[Flow], links: LinkTable, *, with_load: bool = False) -> None:
        """Drop finished flows, append ``new_flows``, and give every flow its max-min fair rate
        (``with_load``: and each used link's carried rate, ``load``)."""
        import numpy as np

        keep = self.alive
        if not keep.all():
            slot = np.cumsum(keep) - 1
            kept_entries = keep[self.entry_flow]
            self.entry_link = self.entry_link[kept_entries]
            self.entry_flow = slot[self.entry_flow[kept_entries]]
            self.flows = list(itertools.compress(self.flows, keep.tolist()))
            self.size, self.remaining = self.size[keep], self.remaining[keep]
            self.weight = self.weight[keep]
        if new_flows:
            ids = [f.link_ids for f in new_flows]
            lengths = np.fromiter(map(len, ids), dtype=np.intp, count=len(ids))  # type: ignore[arg-type]
            first = len(self.flows)
            sizes = np.fromiter((f.size_bytes for f in new_flows), dtype=np.float64, count=len(new_flows))
            self.entry_link = np.concatenate([self.entry_link, *ids])
            self.entry_flow = np.concatenate(
                [self.entry_flow, np.repeat(np.arange(first, first + len(ids)), lengths)]
            )
            self.size = np.concatenate([self.size, sizes])
            weights = np.fromiter((f.weight for f in new_flows), dtype=np.float64, count=len(new_flows))
            self.weight = np.concatenate([self.weight, weights])
            self.remaining = np.concatenate([self.remaining, sizes])
            self.flows.extend(new_flows)
            self.weighted_flows += sum(1 for f in new_flows if f.weight != 1.0)
        self.alive = np.ones(len(self.flows), dtype=bool)
        weighted = self.weight if self.weighted_flows else None
        if self.solver is None:
            self.solver = MaxMinState(links.capacity)
        # the solver's passes were for the other kind of weights: solve afresh
        prior = keep if (weighted is None) == self.solver_unweighted else None
        self.solver_unweighted = weighted is None
        self.rates = self.solver.solve(
            self.entry_link, self.entry_flow, len(self.flows), weighted,
            keep=prior, new=len(new_flows), capacity_Bps=links.capacity,
        )  # fmt: skip
        counts = np.bincount(self.entry_link, minlength=len(links))
        self.links = np.flatnonzero(counts)
        self.counts = counts[self.links]
        if with_load:
            load = np.bincount(self.entry_link, weights=self.rates[self.entry_flow], minlength=len(links))
            self.load = load[self.links].astype(np.float64)

    def progress_per_link(self, n_links: int) -> NDArray[np.float64]:
        """Bytes already sent by the still-active flows, summed per link."""
        import numpy as np

        sent = np.where(self.alive, self.size - self.remaining, 0.0)
        return np.bincount(self.entry_link, weights=sent[self.entry_flow], minlength=n_links).astype(
            np.float64
        )


class Network:
    """All flows of one simulation over one topology."""

    def __init__(self, env: simpy.Environment, topology: Topology, *, router: Router | None = None) -> None:
        self.env = env
        self.topology = topology
        self._graph = topology.graph
        self._succ: dict[str, dict[str, dict[str, Any]]] = topology.graph._succ  # raw dicts: views are slow
        self.router = router if router is not None else Router.for_topology(topology)
        self.links = LinkTable(LinkIndex.for_topology(topology))
        self._ids = itertools.count()
        self._active: dict[int, Flow] = {}
        self._new_flows: list[Flow] = []
        self._flows = _ActiveFlows()
        self._last_update = 0.0
        self._generation = 0
        self._recompute_pending = False
        self.completed: list[Flow] = []
        self.keep_completed = False
        self.recomputations = 0
        self.load_history: list[tuple[float, NDArray[np.intp], NDArray[np.float64]]] = []

    # --- routing ---------------------------------------------------------------------------
    def route(self, src: str, dst: str) -> tuple[Edge, ...]:
        """The lowest-latency path from ``src`` to ``dst`` as a tuple of directed edges (cached)."""
        return self.router.route(src, dst)

    def route_latency(self, route: Sequence[Edge]) -> float:
        """Sum of the links' latencies (s)."""
        succ = self._succ
        return float(sum(succ[u][v]["latency_s"] for u, v in route))

    def route_bandwidth(self, route: Sequence[Edge]) -> float:
        """The narrowest link's usable bandwidth (B/s); infinite for an empty route."""
        succ = self._succ
        return float(min((effective_bandwidth(succ[u][v]) for u, v in route), default=float("inf")))

    def _routed(
        self, src: str, dst: str, route: Sequence[Edge] | None
    ) -> tuple[tuple[Edge, ...], float, NDArray[np.intp]]:
        """(route, latency, link numbers); routes and their link numbers are cached per topology."""
        if route is None:
            path = self.router.route(src, dst)
        else:
            path = route if isinstance(route, tuple) else tuple((u, v) for u, v in route)
        return (path, *self.links.shared.path(path))

    # --- flows -----------------------------------------------------------------------------
    def transfer(
        self,
        src: str,
        dst: str,
        size_bytes: float,
        *,
        route: Sequence[Edge] | None = None,
        tag: str = "",
        weight: float = 1.0,
        arrival: bool = True,
    ) -> simpy.Event:
        """Start moving ``size_bytes`` from ``src`` to ``dst``; the returned event fires on arrival.

        ``weight`` (> 0) is the flow's share of a contended link relative to a plain flow (1).
        ``arrival=False``: the event fires when the last byte has been sent (a caller that models
        the path's latency itself, as the collectives' cost model does).
        """
        if not size_bytes >= 0:
            raise TrainsimError(f"transfer size must be >= 0 bytes, got {size_bytes}")
        if not weight > 0:
            raise TrainsimError(f"transfer weight must be > 0, got {weight}")
        path, latency, ids = self._routed(src, dst, route)
        if not arrival:
            latency = 0.0
        now = float(self.env.now)
        flow = Flow(
            next(self._ids),
            src,
            dst,
            path,
            float(size_bytes),
            float(size_bytes),
            latency,
            self.env.event(),
            now,
            tag,
            float(weight),
            link_ids=ids,
            simple=route is None or len(set(path)) == len(path),
        )
        if src == dst or size_bytes == 0 or not path:
            flow.remaining_bytes = 0.0
            flow.sent_s = now
            self._deliver([flow])
            return flow.done
        self._active[flow.id] = flow
        self._new_flows.append(flow)
        self._request_recompute()
        return flow.done

    @property
    def active_flows(self) -> int:
        return len(self._active)

    def _request_recompute(self) -> None:
        """Recompute rates once, after every other event of this instant (cancels the pending timer)."""
        import simpy

        self._generation += 1
        if self._recompute_pending:
            return
        self._recompute_pending = True
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(self._recompute)
        self.env.schedule(event, _LATE)

    def _advance(self) -> None:
        """Bring every active flow's remaining bytes and the links' busy time up to now."""
        import numpy as np

        now = float(self.env.now)
        dt = now - self._last_update
        active = self._flows
        if dt > 0 and len(active.links):
            active.remaining -= active.rates * dt
            np.maximum(active.remaining, 0.0, out=active.remaining)  # rounding can overshoot by an ulp
            self.links.busy_s[active.links] += dt
        self._last_update = now

    def _recompute(self, _event: simpy.Event) -> None:
        """New fair rates for the active flows, and one timer for the earliest group to finish."""
        import numpy as np

        self._recompute_pending = False
        self._advance()
        self.links.count_new_flows(self._new_flows)
        active = self._flows
        active.rebuild(self._new_flows, self.links, with_load=self.keep_completed)
        self._new_flows = []
        self.recomputations += 1
        if self.keep_completed:
            self.load_history.append((float(self.env.now), active.links, active.load))
        if not active.flows:
            return
        self.links.note_concurrency(active.links, active.counts)
        time_left = active.remaining / active.rates
        first = max(0.0, float(time_left.min()))
        group = np.flatnonzero(time_left <= first * (1.0 + FINISH_TOLERANCE))
        generation = self._generation
        timer = self.env.timeout(max(0.0, first))
        timer.callbacks.append(lambda _ev: self._on_timer(generation, group))

    def _on_timer(self, generation: int, group: NDArray[np.intp]) -> None:
        import numpy as np

        if generation != self._generation:
            return  # superseded by a later start or end
        self._advance()
        active = self._flows
        now = float(self.env.now)
        finished = [active.flows[i] for i in group.tolist()]
        for flow, rate in zip(finished, active.rates[group].tolist(), strict=True):
            del self._active[flow.id]
            flow.rate_Bps = rate
            flow.remaining_bytes = 0.0
            flow.sent_s = now
            if flow.weight != 1.0:
                active.weighted_flows -= 1
        if len(finished) == 1 and finished[0].simple and finished[0].link_ids is not None:
            # one flow (the common case): its size on each of its links, which a route lists once
            self.links.bytes_done[finished[0].link_ids] += finished[0].size_bytes
        else:
            # (the group's flows as a mask over slots: np.isin sorts both arrays on every call)
            ending = np.zeros(len(active.flows), dtype=bool)
            ending[group] = True
            entries = active.alive[active.entry_flow] & ending[active.entry_flow]
            self.links.add_bytes(active.entry_link[entries], active.size[active.entry_flow[entries]])
        active.alive[group] = False
        active.rates[group] = 0.0
        active.remaining[group] = 0.0
        self._deliver(finished)
        self._request_recompute()

    def _deliver(self, flows: list[Flow]) -> None:
        """Fire each flow's ``done`` once its last byte has crossed the route's latency."""
        by_latency: dict[float, list[Flow]] = {}
        for flow in flows:
            by_latency.setdefault(flow.latency_s, []).append(flow)
        if self.keep_completed:
            self.completed.extend(flows)
        for latency, group in by_latency.items():
            if latency > 0:
                self.env.timeout(latency).callbacks.append(lambda _ev, g=group: self._arrive(g))  # type: ignore[misc]
            else:
                self._arrive(group)

    def _arrive(self, flows: list[Flow]) -> None:
        now = float(self.env.now)
        for flow in flows:
            flow.end_s = now
            flow.done.succeed(flow)

    # --- statistics ------------------------------------------------------------------------
    @property
    def stats(self) -> LinkStatsView:
        """Per-link counters now (a snapshot: take it once, then read as many links as needed)."""
        self._advance()
        n = len(self.links)
        in_flight = self._flows.progress_per_link(n)
        return LinkStatsView(self.links, in_flight)

    def utilisation(self, elapsed_s: float | None = None) -> dict[Edge, float]:
        """Bytes carried over (bandwidth x elapsed) per directed link that carried a flow."""
        span = float(self.env.now) if elapsed_s is None else elapsed_s
        view = self.stats
        if span <= 0:
            return dict.fromkeys(view, 0.0)
        fraction = view.bytes_per_link / (self.links.capacity * span)
        index = self.links.index
        return {e: float(fraction[index[e]]) for e in view}

    def bottleneck_link(self) -> Edge | None:
        """The link that was busiest relative to its bandwidth (bytes / bandwidth); None if idle."""
        return self.links.busiest(self.stats.bytes_per_link)

    def link_summary(self, elapsed_s: float | None = None) -> list[LinkClassSummary]:
        """Per link class (``kind``): links used, bytes, utilisation, peak concurrency, busiest link."""
        span = float(self.env.now) if elapsed_s is None else elapsed_s
        return self.links.summary(self.stats.bytes_per_link, span)

    def link_utilisation_series(self, edges: Sequence[Edge]) -> dict[Edge, list[tuple[float, float]]]:
        """(time_s, utilisation) steps for ``edges``; needs ``keep_completed`` set before flows start."""
        index = {self.links.index[e]: e for e in edges if e in self.links.index}
        series: dict[Edge, list[tuple[float, float]]] = {e: [] for e in edges}
        for time_s, links, load in self.load_history:
            current = dict(zip(links.tolist(), load.tolist(), strict=True))
            for i, e in index.items():
                value = current.get(i, 0.0) / float(self.links.capacity[i])
                if not series[e] or series[e][-1][1] != value:
                    series[e].append((time_s, value))
        return series
