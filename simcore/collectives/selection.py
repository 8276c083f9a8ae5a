"""Algorithm and protocol choice as NCCL makes it: the (algorithm, protocol) pair predicted fastest.

NCCL's tuner (src/graph/tuning.cc ncclTopoTuneModel; src/enqueue.cc getAlgoInfo / topoGetAlgoInfo)
predicts every enabled pair's time as latency + bytes / bandwidth and runs the fastest;
``NCCL_ALGO`` / ``NCCL_PROTO`` restrict the candidates. We do the same with our cost model
(:mod:`simcore.collectives.cost`) on the actual routes, seen as NCCL's model sees it
(:func:`~simcore.collectives.cost.tuner_time_s`): no pipeline fill but NCCL's medium-size tree
correction, and, where the network plugin reports a latency for its device (aws-ofi-nccl on EFA:
75 us), every node-crossing hop at that latency. The winner is priced by the cost model itself, so
where NCCL's model misjudges a pair, trainsim runs NCCL's pick at its real cost rather than the
cheapest candidate. Candidates per op: :data:`AUTO` (NCCL's
algorithms only; ``direct`` and ``hierarchical`` run only when pinned), each where the hardware and
options allow it (NVLS on one node of Hopper GPUs with an NVLS switch and more than two of them;
NVLS-tree across such nodes; CollNet only when enabled; PAT at one GPU per node). Ties go to the
earlier candidate, so ring wins over NVLS where NVLS cannot beat it (four or fewer GPUs).

Large groups (more than :data:`REPRESENTATIVE_NODES` nodes) are priced through a representative:
the candidates are laid out on the group's first nodes only, their link time per byte read from
that layout, and their latency counts (ring steps, tree depth) taken for the whole group. Only the
winner is laid out in full, and its protocol is then chosen on the full layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from simcore.collectives.cost import PhaseCost, allowed_protocols, phase_costs, tuner_time_s
from simcore.collectives.group import GroupInfo
from simcore.collectives.options import NcclOptions
from simcore.collectives.pat import pat_counts
from simcore.collectives.plan import AlgorithmUnavailable, Edge, Hops, Plan
from simcore.collectives.registry import ALGORITHMS, AUTO
from simcore.collectives.ring import ring_counts
from simcore.collectives.tree import dtree_depth
from simcore.errors import TrainsimError

__all__ = [
    "REPRESENTATIVE_NODES",
    "as_whole",
    "best_protocol",
    "candidates",
    "check_algorithm",
    "choose",
    "extrapolate",
]

REPRESENTATIVE_NODES = 8

Unit = tuple[Plan, list[tuple[float, Edge | None]]]


def candidates(op: str, info: GroupInfo, options: NcclOptions) -> tuple[str, ...]:
    """The algorithms NCCL would weigh for ``op`` on this group under ``options``."""
    available = {
        "nvls": info.nvls,
        "nvls_tree": info.nvls_tree,
        "collnet_direct": info.collnet,
        "pat": info.pat,
    }
    names = [n for n in AUTO[op] if n in ALGORITHMS[op] and available.get(n, True)]
    if info.backend != "nccl":
        names = [n for n in names if n not in available]
    allowed = [n for n in names if options.allows_algorithm(n)]
    return tuple(allowed or names[:1])  # NCCL falls back to the ring when the user excludes every algorithm


def _steps(op: str, ranks: int) -> int:
    if op == "all_reduce":
        return 2 * (ranks - 1)
    return ranks - 1


def extrapolate(hops: Hops, op: str, info: GroupInfo) -> Hops:
    """``hops`` of a representative layout with the latency counts of the whole group."""
    n, p = info.nodes, info.ranks
    if hops.pattern == "ring":
        intra, inter = ring_counts(_steps(op, p), n, 2 if op == "all_reduce" else 1)
        return replace(hops, intra=intra, inter=inter)
    if hops.pattern == "chain":
        return replace(hops, intra=float(p - n), inter=float(n - 1))
    if hops.pattern in ("tree", "nvls_tree"):
        return replace(hops, inter=2.0 * dtree_depth(n))
    if hops.pattern == "pat":
        inter, extra = pat_counts(p, n)
        return replace(hops, inter=inter, extra_s=extra)
    return hops


def _bytes_scale(hops: Hops, op: str, ranks: int, sub_ranks: int) -> float:
    """How a ring-like layout's bytes per hop, (p-1)/p, differ between the group and its representative."""
    if hops.pattern in ("ring", "pat"):
        return ((ranks - 1) / ranks) / ((sub_ranks - 1) / sub_ranks) if sub_ranks > 1 else 1.0
    return 1.0


def best_protocol(
    unit: Unit, info: GroupInfo, options: NcclOptions, size: float, pinned: str | None = None
) -> tuple[str, list[PhaseCost], float]:
    """The protocol NCCL's tuner ranks fastest for ``unit`` at ``size`` (or the pinned one):
    (protocol, its priced phase costs, the tuner's time for it - the ranking key, not a price)."""
    plan, links = unit
    protos = allowed_protocols(plan, info, options)
    if pinned is not None:
        if pinned not in protos:
            raise AlgorithmUnavailable(
                f"protocol {pinned} cannot run {plan.algorithm} {plan.op} here; allowed: {', '.join(protos) or 'none'}"
            )
        protos = (pinned,)
    best: tuple[str, list[PhaseCost], float] | None = None
    for proto in protos:
        costs = phase_costs(plan, links, proto, size, info)
        time = tuner_time_s(plan, costs, proto, size, info)
        if best is None or time < best[2]:
            best = (proto, costs, time)
    if best is None:
        raise AlgorithmUnavailable(f"no protocol allowed by the options can run {plan.algorithm} {plan.op}")
    return best


def choose(
    op: str,
    info: GroupInfo,
    options: NcclOptions,
    size: float,
    unit: Callable[[str], Unit],
    sub_ranks: int,
    pinned_protocol: str | None = None,
) -> str:
    """The algorithm whose best protocol is fastest for ``size`` bytes (``unit(name)`` lays one out,
    on the representative of ``sub_ranks`` ranks when the group is large)."""
    best_name, best_time = "", float("inf")
    errors: list[str] = []
    for name in candidates(op, info, options):
        try:
            plan, links = unit(name)
            if sub_ranks != info.ranks:
                plan, links = as_whole(plan, links, op, info, sub_ranks)
            _, _, time = best_protocol((plan, links), info, options, size, pinned_protocol)
        except AlgorithmUnavailable as exc:
            errors.append(str(exc))
            continue
        if time < best_time:
            best_name, best_time = name, time
    if not best_name:
        raise AlgorithmUnavailable(f"no algorithm for {op} can run on this group: {'; '.join(errors)}")
    return best_name


def as_whole(
    plan: Plan, links: Sequence[tuple[float, Edge | None]], op: str, info: GroupInfo, sub_ranks: int
) -> Unit:
    phases = tuple(replace(p, hops=extrapolate(p.hops, op, info)) for p in plan.phases)
    scaled = [
        (per_byte * _bytes_scale(p.hops, op, info.ranks, sub_ranks), edge)
        for p, (per_byte, edge) in zip(plan.phases, links, strict=True)
    ]
    return replace(plan, phases=phases), scaled


def check_algorithm(op: str, algorithm: str) -> None:
    if algorithm not in ALGORITHMS[op]:
        raise TrainsimError(
            f"unknown algorithm {algorithm!r} for {op}; allowed: {', '.join(ALGORITHMS[op]) or 'none yet'}"
        )
