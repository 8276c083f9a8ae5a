"""Whether an evaluated plan repeats itself: operations compared across a shift, and blocks.

The fast path extrapolates a step from a part that repeats: a probe's middle micro-batches
(:mod:`simcore.fastpath.step`) and a folded copy's steady blocks (:mod:`simcore.fastpath.fold`).
Both rest on one argument: the scheduler is deterministic and invariant under a shift in time,
so where a window of operations is the previous window's operations (:func:`same_op`: kinds,
durations, bytes, memory changes, dependencies at the same offsets), runs at the previous
window's times shifted by one period, and leaves nothing running past the window after next, a
further copy of the window inserted there shifts everything after it by that period and changes
nothing else.

:func:`block_slopes` checks this for a copy's blocks. A plan passes over the blocks in
*sweeps*: each micro-batch's forward (ascending blocks) and its backward with any recompute
(descending). In every sweep, two consecutive windows of ``period`` blocks, the first from the
sweep's second block on that repeat (a sweep's first and last blocks are transients, and can be a
few more: the first prefetch buckets, the last prefetches), must be the same operations at
shifted times, their memory samples shifted in time by the period and in level by one constant
(a forward window keeps its activations), nothing from before the first window still running
when the second begins, nor anything of the first when the block after the second begins. Each
sweep then adds its period per further window; the answer is those periods summed per
micro-batch.

Both streams must shift by the same period, with one exception. A comm stream whose backlog
shrinks block by block (the regime change of a deep DDP step: the all-reduces queue a little less
behind the backward per block, until at some depth they no longer queue) shifts by less than the
compute: refused. One whose backlog grows (its collectives back to back, each waiting for the one
before rather than for its inputs) keeps doing so at any depth, and is accepted where the compute
cannot notice (:func:`_stays_behind`), with the comm stream's period. That accepts a little too
much where collectives also run slower under compute (the tail after the compute ends then runs
faster, and the period is not the comm stream's): the fold's second copy, which must differ from
the first by exactly the periods, refuses those.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from simcore.step.eventfree import TimedRun
from simcore.step.plan import COMM, COMPUTE, Op, StepPlan

__all__ = ["FORWARD", "block_slopes", "same_op", "sweeps"]

FORWARD = "fwd"
_PASSES = frozenset(("fwd", "bwd", "recompute", "fwd+bwd"))
_TOLERANCE = 1e-9  # of the step time: shifts equal to this (sums of the same durations round alike)


def same_op(a: Op, b: Op, shift: int) -> bool:
    """Whether ``b`` is ``a`` again ``shift`` operations later (its dependencies shifted with it)."""
    return (
        (a.stream, a.kind, a.duration_s, a.bytes, a.link, a.link_kind, a.contention)
        == (b.stream, b.kind, b.duration_s, b.bytes, b.link, b.link_kind, b.contention)
        and (a.on_start, a.on_end, a.after_end) == (b.on_start, b.on_end, b.after_end)
        and tuple(i + shift for i in a.after) == b.after
        and tuple(i + shift for i in a.after_start) == b.after_start
    )


def sweeps(plan: StepPlan) -> list[tuple[int | None, list[tuple[int, int]]]] | None:
    """The plan's passes over the blocks: per sweep, its micro-batch and, in order, each block with
    the id of its first operation (a sweep is a run of compute passes with a block in their key,
    of one micro-batch and one direction: forward, or backward with recompute). None where a sweep
    returns to a block it left."""
    found: list[tuple[int | None, list[tuple[int, int]]]] = []
    current: tuple[int | None, bool] | None = None
    for op in plan.ops:
        key = op.key
        if op.stream != COMPUTE or key.block is None or op.kind not in _PASSES:
            continue
        which = (key.micro_batch, op.kind == FORWARD)
        if which != current:
            current = which
            found.append((key.micro_batch, []))
        blocks = found[-1][1]
        if not blocks or blocks[-1][0] != key.block:
            if any(b == key.block for b, _ in blocks):
                return None
            blocks.append((key.block, op.id))
    return found


def block_slopes(
    plan: StepPlan, timed: TimedRun, period: int, blocks_of_run: range
) -> dict[int | None, float] | None:
    """Seconds one more ``period`` of blocks adds to each micro-batch's sweeps of a plan whose run of
    identical blocks is ``blocks_of_run``, if every sweep's steady windows repeat (see the module
    docstring); None if one does not, or a sweep passes over other blocks than the run's."""
    found = sweeps(plan)
    if not found:
        return None
    tolerance = _TOLERANCE * max(timed.run.step_time_s, 1e-30)
    ended = list(itertools.accumulate(timed.ends, max))  # the last end of the operations up to each
    slopes: dict[int | None, float] = {}
    for micro, blocks in found:
        if sorted(b for b, _ in blocks) != list(blocks_of_run):
            return None
        shift = None
        # the first two windows from the sweep's second block on that repeat (a transient can last
        # a few blocks: the first prefetch buckets, the last prefetches)
        for first in range(1, len(blocks) - 2 * period):
            bounds = [blocks[first + i * period][1] for i in range(3)]
            shift = _window_shift(plan, timed, ended, bounds, tolerance)
            if shift is not None:
                break
        if shift is None:
            return None
        slopes[micro] = slopes.get(micro, 0.0) + shift
    return slopes


def _window_shift(
    plan: StepPlan, timed: TimedRun, ended: Sequence[float], bounds: Sequence[int], tolerance: float
) -> float | None:
    """What one more window adds to the step, if the windows ``[bounds[0], bounds[1])`` and
    ``[bounds[1], bounds[2])`` of operation ids repeat (the block after the second beginning one
    period after it): the compute stream's period, or the comm stream's where that stream falls
    further behind per window and the step stays bound by it (:func:`_stays_behind`); None if not.
    ``ended``: the latest end of the operations up to each id."""
    ops, begin, end = plan.ops, timed.starts, timed.ends
    size = bounds[1] - bounds[0]
    if size <= 0 or bounds[2] - bounds[1] != size or bounds[2] >= len(ops):
        return None
    if not all(same_op(ops[i], ops[i + size], size) for i in range(bounds[0], bounds[1])):
        return None
    at = [begin[b] for b in bounds]
    period = at[1] - at[0]
    if abs(at[2] - at[1] - period) > tolerance:
        return None
    comm = [i for i in range(bounds[0], bounds[1]) if ops[i].stream == COMM]
    behind = period if not comm else begin[comm[0] + size] - begin[comm[0]]
    for i in range(bounds[0], bounds[1]):
        shift = period if ops[i].stream == COMPUTE else behind
        if ops[i].stream not in (COMPUTE, COMM) or (
            abs(begin[i + size] - begin[i] - shift) > tolerance
            or abs(end[i + size] - end[i] - shift) > tolerance
        ):
            return None
    if not _memory_repeats(timed, at, period, tolerance):
        return None
    if abs(behind - period) > tolerance:
        # The comm stream's backlog grows (or shrinks, and vanishes at some depth: refused).
        return behind if behind > period and _stays_behind(plan, timed, bounds, tolerance) else None
    # Nothing before the first window may still run when the second begins, nor anything of the
    # first when the block after the second begins.
    if ended[bounds[0] - 1] > at[1] + tolerance or ended[bounds[1] - 1] > at[2] + tolerance:
        return None
    return period


def _stays_behind(plan: StepPlan, timed: TimedRun, bounds: Sequence[int], tolerance: float) -> bool:
    """Whether a comm stream falling further behind the compute per window keeps the step bound
    by it at any depth: its operations from before the first window on run back to back (each
    waits for the one before, not for its inputs, and so the more behind, the more so), and every
    compute operation from the first window on runs inside that busy stretch (slowed alike at any
    depth) until one waits for a collective of it (from there on the compute follows the comm)."""
    ops, begin, end = plan.ops, timed.starts, timed.ends
    comm = [op.id for op in ops if op.stream == COMM]
    first = next(j for j, i in enumerate(comm) if i >= bounds[0])
    start = first
    while start > 0 and abs(begin[comm[start]] - end[comm[start - 1]]) <= tolerance:
        start -= 1
    stop = first
    while stop + 1 < len(comm) and abs(begin[comm[stop + 1]] - end[comm[stop]]) <= tolerance:
        stop += 1
    busy_from, busy_to = begin[comm[start]], end[comm[stop]]
    chain = set(comm[start : stop + 1])
    if busy_from > begin[bounds[0]] + tolerance or comm[stop] < bounds[2]:
        return False  # the stretch must cover both windows
    for op in ops[bounds[0] :]:
        if op.stream != COMPUTE:
            continue
        waits = [d for d in (*op.after, *op.after_start) if ops[d].stream == COMM]
        if waits:
            gate = max(waits, key=lambda d: end[d])
            return gate in chain and abs(begin[op.id] - end[gate]) <= tolerance
        if end[op.id] > busy_to + tolerance:
            return False
    return True


def _memory_repeats(timed: TimedRun, at: Sequence[float], period: float, tolerance: float) -> bool:
    """Whether the memory samples of the second window are the first's, ``period`` later and
    offset by one constant."""
    samples = timed.run.memory.samples
    times = [t for t, _, _ in samples]
    windows = [
        samples[bisect.bisect_left(times, at[m]) : bisect.bisect_left(times, at[m + 1])] for m in (0, 1)
    ]
    if len(windows[0]) != len(windows[1]):
        return False
    offset: float | None = None
    for (t0, total0, _), (t1, total1, _) in zip(*windows, strict=True):
        if abs(t1 - t0 - period) > tolerance:
            return False
        if offset is None:
            offset = total1 - total0
        elif abs(total1 - total0 - offset) > 1e-9 * max(abs(total0), 1.0):
            return False
    return True
