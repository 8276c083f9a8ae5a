"""Automatic algorithm choice in NCCL's spirit.

NCCL's tuner (src/graph/tuning.cc, ncclTopoTuneModel, and getAlgoInfo in src/enqueue.cc) predicts
each enabled algorithm's time as latency + size / bandwidth for the detected topology and runs
the fastest; NCCL_ALGO pins one. We do the same with our own closed forms: among the candidates
NCCL would consider for the op, the one with the smallest uncontended alpha-beta time on the
actual routes wins (ties go to the earlier candidate). In practice this gives NCCL's pattern:
tree (few latency steps) for small multi-node all-reduces, ring for large ones, NVLS/SHARP when
the switches can reduce, and hierarchical across nodes when the node boundary is the bottleneck.
Tree, hierarchical and SHARP are multi-node algorithms and only considered when the group spans
several hosts (NCCL's tree is a chain inside a node and never wins there). Direct/one-shot is
never chosen automatically (NCCL has no such algorithm); pin it with ``algorithm="direct"``.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.collectives.plan import AlgorithmUnavailable, Phase
from simcore.collectives.registry import ALGORITHMS

__all__ = ["CANDIDATES", "MULTI_NODE_ONLY", "pick_fastest"]

MULTI_NODE_ONLY = frozenset({"tree", "hierarchical", "sharp"})

# Candidates per op, in tie-break order.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("nvls", "sharp", "ring", "tree", "hierarchical"),
    "all_gather": ("nvls", "ring"),
    "reduce_scatter": ("nvls", "ring"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "send_recv": ("p2p",),
    "ps_push": ("ps",),
    "ps_pull": ("ps",),
}


def pick_fastest(
    op: str,
    multi_node: bool,
    build: Callable[[str], tuple[Phase, ...]],
    cost: Callable[[tuple[Phase, ...]], float],
) -> str:
    """The candidate for ``op`` whose built phases ``cost`` least (unavailable ones skipped)."""
    best_name = ""
    best_cost = float("inf")
    for name in CANDIDATES[op]:
        if name not in ALGORITHMS[op] or (name in MULTI_NODE_ONLY and not multi_node):
            continue
        try:
            phases = build(name)
        except AlgorithmUnavailable:
            continue
        t = cost(phases)
        if t < best_cost:
            best_name, best_cost = name, t
    if not best_name:
        raise AlgorithmUnavailable(f"no algorithm for {op} can run on this group")
    return best_name
