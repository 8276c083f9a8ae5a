"""Closed-form time of a runnable (materialized) plan when nothing else competes, and its bottleneck.

Each phase lasts its latency plus the longer of two bandwidth bounds: its most loaded link's bytes
over that link's usable rate (:func:`simcore.topology.effective_bandwidth`), and its protocol's
throughput floor. The discrete-event run of the same plan gives the same time where nothing
competes (its flows share links in proportion to their bytes, so all finish when the most loaded
link drains); a property test keeps the two in step. Several plans run at once (concurrent
communicators) add their bytes on shared links: :func:`merged_time`.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.collectives.cost import link_time_per_byte
from simcore.collectives.plan import Edge, Phase, Plan
from simcore.topology import Topology, effective_bandwidth

__all__ = ["merged_link_times", "merged_time", "phase_time", "plan_cost", "plan_time"]


def phase_time(topology: Topology, phase: Phase) -> tuple[float, Edge | None]:
    """One materialized phase's time and its most loaded link."""
    link_s, edge = link_time_per_byte(topology, phase)  # a materialized phase carries real bytes
    return phase.latency_s + max(link_s, phase.engine_s), edge


def plan_cost(topology: Topology, plan: Plan) -> tuple[float, Edge | None]:
    """Uncontended time of a materialized plan, and the link limiting its longest link-bound phase."""
    total, best, best_edge = 0.0, -1.0, None
    for phase in plan.phases:
        t, edge = phase_time(topology, phase)
        total += t
        if edge is not None and t - phase.latency_s > best:
            best, best_edge = t - phase.latency_s, edge
    return total, best_edge


def plan_time(topology: Topology, plan: Plan) -> float:
    return plan_cost(topology, plan)[0]


def merged_link_times(topology: Topology, plans: Sequence[Plan]) -> list[tuple[float, Edge | None]]:
    """Per phase of phase-aligned plans run together: the link time of the first plan's links under
    everyone's summed loads, and the link that sets it."""
    succ = topology.graph._succ
    out: list[tuple[float, Edge | None]] = []
    for phases in zip(*(p.phases for p in plans), strict=True):
        loads: dict[Edge, float] = {}
        for phase in phases:
            for edge, load in phase.link_loads().items():
                loads[edge] = loads.get(edge, 0.0) + load
        worst, worst_edge = 0.0, None
        for u, v in phases[0].link_loads():
            t = loads[u, v] / effective_bandwidth(succ[u][v])
            if t > worst:
                worst, worst_edge = t, (u, v)
        out.append((worst, worst_edge))
    return out


def merged_time(topology: Topology, plans: Sequence[Plan]) -> float:
    """Time of the first of phase-aligned plans run together (same algorithm on same-shape groups):
    per phase, the latest latency plus the longer of the summed-load link time and the floor."""
    total = 0.0
    for phases, (link_s, _) in zip(
        zip(*(p.phases for p in plans), strict=True), merged_link_times(topology, plans), strict=True
    ):
        total += max(p.latency_s for p in phases) + max(link_s, max(p.engine_s for p in phases))
    return total
