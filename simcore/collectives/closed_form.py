"""Closed-form alpha-beta cost of a plan when nothing else competes, and its bottleneck link.

The textbook formulas (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009; NCCL's
src/graph/tuning.cc) are given for reference; :func:`plan_time` evaluates the same model on the
actual routes, so hops that share a link (e.g. two ring hops through one PCIe switch) divide its
bandwidth.
"""

from __future__ import annotations

from simcore.collectives.plan import Edge, Phase, Plan
from simcore.topology import Topology

__all__ = [
    "phase_bandwidth_time",
    "plan_bottleneck",
    "plan_cost",
    "plan_time",
    "ring_all_gather_time",
    "ring_all_reduce_time",
]


def ring_all_reduce_time(ranks: int, size_bytes: float, bandwidth_Bps: float, alpha_s: float) -> float:
    """Ring all-reduce: 2(p-1) steps, each moving S/p over every hop: 2(p-1)/p S/B + 2(p-1) alpha."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps / ranks * size_bytes / bandwidth_Bps + steps * alpha_s


def ring_all_gather_time(ranks: int, size_bytes: float, bandwidth_Bps: float, alpha_s: float) -> float:
    """Ring all-gather or reduce-scatter of an S-byte buffer: (p-1)/p S/B + (p-1) alpha."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) / ranks * size_bytes / bandwidth_Bps + (ranks - 1) * alpha_s


def phase_bandwidth_time(topology: Topology, phase: Phase) -> tuple[float, Edge | None]:
    """Time for the most loaded link to carry its bytes, and that link (None if nothing moves)."""
    succ = topology.graph._succ  # raw adjacency: networkx's edge views cost a call per lookup
    worst = 0.0
    worst_edge: Edge | None = None
    for (u, v), load in phase.link_loads().items():  # insertion order is deterministic
        t = load / float(succ[u][v]["bandwidth_Bps"])
        if t > worst or (t == worst and worst_edge is not None and (u, v) < worst_edge):
            worst, worst_edge = t, (u, v)
    return worst, worst_edge


def plan_cost(topology: Topology, plan: Plan) -> tuple[float, Edge | None]:
    """Uncontended time (sum over phases of latency + bottleneck bandwidth time) and the link
    limiting the phase with the longest bandwidth time (None when nothing moves)."""
    total = 0.0
    best = 0.0
    best_edge: Edge | None = None
    for phase in plan.phases:
        t, edge = phase_bandwidth_time(topology, phase)
        total += phase.latency_s + t
        if edge is not None and t > best:
            best, best_edge = t, edge
    return total, best_edge


def plan_time(topology: Topology, plan: Plan) -> float:
    """Uncontended time: the sum over phases of latency + bottleneck bandwidth time."""
    return plan_cost(topology, plan)[0]


def plan_bottleneck(topology: Topology, plan: Plan) -> Edge | None:
    """The link that limits the phase with the longest bandwidth time."""
    return plan_cost(topology, plan)[1]
