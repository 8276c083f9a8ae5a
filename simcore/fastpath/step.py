"""One synchronous step on the fast path, as a :class:`~simcore.report.StepReport`.

Long gradient accumulation is extrapolated, exactly: a step of ``k`` micro-batches is the first
micro-batch, ``k - 2`` identical middle ones and the last (with the optimizer). When ``k`` is
large, a probe plan of a few micro-batches (:data:`PROBES`) is built and evaluated instead, and its
last two middle micro-batches are checked against each other: the same operations (kinds, durations, bytes,
memory changes, dependencies at the same offsets), the same times relative to their first
forward, the same memory levels, and nothing of a micro-batch still running two micro-batches
later. The scheduler is deterministic and invariant under a shift in time, so each further middle
micro-batch then repeats the last one exactly, shifted by the period: the step time, compute,
communication, bytes and link use grow by one period's worth per micro-batch, and the memory
peak is the probe's. When the check fails (a communication backlog still growing, say), the full
plan is built and evaluated. Four micro-batches are tried first; where the first micro-batch
leaves a different trace in the next (ZeRO-2 keeps its gradient shard), five, so that the compared
micro-batches both follow a middle one; the context's caches remember which size worked per
strategy (:class:`~simcore.step.caches.StepCaches`, shared by a sweep's contexts). Only
the representative rank's plan (streams ``compute`` and ``comm``) is extrapolated.

A probe does not depend on the global batch (it runs ``size`` micro-batches whatever ``k`` is), so
a caller that names everything else the plan depends on (``reuse``: the planner's cluster, GPU
count, workload, configuration but the batch, layout) gets the probe evaluated once for every
batch size of a sweep; the last :data:`~simcore.step.caches.PROBE_CACHE_SIZE` are kept in the
context's caches, for as long as whoever runs the sweep keeps those. A sweep times every layout of
one batch size before the next, so the cache holds a batch size's probes (one per GPU count, layout
and folded copy); each is kept reduced to what a longer step's report reads (:class:`_Kept`), and
the report of a fresh probe is made from the same reduction, so a reused probe reports bit for bit
what a fresh one does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from dataclasses import dataclass, replace

from simcore.compute.memory import MemoryPeak
from simcore.errors import TrainsimError
from simcore.fastpath.fold import FoldCheck, Measured, fold_step
from simcore.fastpath.repeat import block_slopes, same_op
from simcore.report import LinkBusy, StepReport
from simcore.step.eventfree import TimedRun, evaluate_plan_timed
from simcore.step.plan import (
    COMM,
    COMPUTE,
    OpKey,
    Phase,
    PhasePart,
    PlanRun,
    StepPlan,
    phase_of,
    phase_text,
)
from simcore.strategies.base import StepContext, Strategy
from simcore.strategies.runner import StepResult, comm_slowdown_under_compute, report_step

__all__ = ["MIN_EXTRAPOLATED", "PROBES", "fast_step_report"]

# Micro-batches of a probe plan: the first, two middle ones to compare (after a fifth's middle one
# when four are not enough), and the last.
PROBES = (4, 5)
MIN_EXTRAPOLATED = 4  # from here a probe costs no more than the full plan (and is it when k = 4)
_PASSES = ("fwd", "bwd", "recompute", "fwd+bwd")


@dataclass(frozen=True, slots=True)
class _Period:
    """What one middle micro-batch adds to the step."""

    time_s: float
    compute_s: float
    comm_s: float
    comm_bytes: float
    busy: LinkBusy


def fast_step_report(
    strategy: Strategy,
    ctx: StepContext,
    *,
    cluster: str,
    device: str,
    peak_flops: float,
    slowdown: float | None,
    reuse: Hashable | None = None,
) -> StepReport:
    """``strategy``'s step on ``ctx`` evaluated on the fast path (``slowdown`` as
    :func:`~simcore.strategies.runner.simulate_step` takes it: None is per-collective contention).

    ``reuse``: a key for everything ``ctx``'s plan depends on except the global batch, to share
    probes between batch sizes (see the module docstring); None evaluates afresh. A long run of
    identical blocks is folded first (:mod:`simcore.fastpath.fold`). One deterministic step only:
    several steps or jittered compute are simulated (:func:`simcore.fastpath.run.evaluate_step`
    routes them)."""
    if ctx.config.steps > 1 or ctx.config.compute_jitter_sigma > 0:
        raise TrainsimError(
            "the fast-path report is one deterministic step; evaluate several or jittered steps "
            "with simcore.fastpath.run.evaluate_step"
        )
    contention = _Contention(slowdown, comm_slowdown_under_compute(ctx) if slowdown is None else 1.0)
    copies = replace(contention, phase_peaks=True)

    def measure(sub: StepContext, key: Hashable | None, check: FoldCheck | None) -> Measured:
        return _measure(strategy, sub, cluster=cluster, device=device, peak_flops=peak_flops,
                        contention=replace(copies, fold_check=check), reuse=key)  # fmt: skip

    folded = fold_step(strategy, ctx, measure, peak_flops=peak_flops, reuse=reuse)
    if folded is not None:
        return folded
    return _measure(strategy, ctx, cluster=cluster, device=device, peak_flops=peak_flops,
                    contention=contention, reuse=reuse).report  # fmt: skip


def _measure(
    strategy: Strategy,
    ctx: StepContext,
    *,
    cluster: str,
    device: str,
    peak_flops: float,
    contention: _Contention,
    reuse: Hashable | None,
) -> Measured:
    """The step unfolded: extrapolated from a probe when accumulation is long, else whole."""
    k = ctx.accumulation
    if k >= MIN_EXTRAPOLATED:
        got = _extrapolated(strategy, ctx, k, cluster=cluster, device=device, peak_flops=peak_flops,
                            contention=contention, reuse=reuse)  # fmt: skip
        if got is not None:
            return got
    # One step, as simulate_step would run it; only the spans a report reads.
    plan = strategy.build_plan(ctx)
    timed = _evaluate(plan, ctx, contention)
    result = StepResult(plan, timed.run, [timed.run.step_time_s])
    report = report_step(result, ctx, cluster=cluster, device=device, peak_flops=peak_flops)
    return _measured(report, _busy(plan, timed), timed, slope=_slope(_slopes(plan, timed, contention)))


def _slopes(plan: StepPlan, timed: TimedRun, contention: _Contention) -> dict[int | None, float] | None:
    """Per micro-batch, what one more period of blocks adds (:func:`~simcore.fastpath.repeat.block_slopes`),
    where the contention settings ask for the fold's check; None where not asked or not repeating."""
    check = contention.fold_check
    if check is None:
        return None
    period, first, depth = check
    return block_slopes(plan, timed, period, range(first, first + depth))


def _slope(
    slopes: dict[int | None, float] | None, extra: int = 0, repeated: int | None = None
) -> float | None:
    """What one more period of blocks adds to the step: each micro-batch's part, and ``extra`` more
    of micro-batch ``repeated``'s (a probe's repeating middle one, for the micro-batches it stands for)."""
    if slopes is None:
        return None
    return math.fsum(slopes.values()) + extra * slopes.get(repeated, 0.0)


def _measured(
    report: StepReport,
    busy: LinkBusy,
    timed: TimedRun | PlanRun,
    renumber: tuple[float, int, int] | None = None,
    slope: float | None = None,
) -> Measured:
    """What folding reads of a step (``timed``: its run); ``renumber`` (the start of a probe's last
    micro-batch, the probe's micro-batches and how many more the step has): phases from then on
    renumbered; ``slope``: what one more period of blocks adds to the step, where checked."""
    memory = (timed.run if isinstance(timed, TimedRun) else timed).memory
    # (a list: the timeline names each phase once, and renumbering keeps them apart)
    peaks: list[tuple[Phase, tuple[float, float, dict[str, float]]]] = []
    for total, at, parts, key in (memory.phase_peaks or {}).values():
        phase = phase_of(key)  # type: ignore[arg-type]
        if renumber is not None and at >= renumber[0]:
            phase = _renumbered(phase, *renumber[1:])
        peaks.append((phase, (total, at, parts)))
    return Measured(report, busy, peaks, memory.fragmentation, slope)


@dataclass(frozen=True, slots=True)
class _Contention:
    """The contention settings of :func:`~simcore.step.des.run_plan`, as simulate_step
    derives them from its ``slowdown``, and whether the memory timeline keeps each phase's peak
    (a folded model's copies: :mod:`simcore.fastpath.fold`), and the fold's check of a copy's blocks
    (period, first block and blocks of its run) when asked."""

    slowdown: float | None
    comm_slowdown: float
    phase_peaks: bool = False
    fold_check: FoldCheck | None = None


def _evaluate(plan: StepPlan, ctx: StepContext, contention: _Contention) -> TimedRun:
    return evaluate_plan_timed(
        plan,
        capacity_bytes=ctx.device_memory_bytes,
        slowdown=contention.slowdown,
        comm_slowdown=contention.comm_slowdown,
        comm_spans_only=True,
        phase_peaks=contention.phase_peaks,
    )


@dataclass(slots=True)
class _Probe:
    """A probe plan of a few micro-batches, evaluated, and its period if the middle ones repeat."""

    plan: StepPlan
    timed: TimedRun
    starts: list[int]
    period: _Period | None


@dataclass(slots=True)
class _CommPlan(StepPlan):
    """A probe's plan as its extrapolated reports read it: the communication operations (the links
    a report names), with the compute time and bytes of the whole plan summed once."""

    compute_total_s: float = 0.0
    comm_total_bytes: float = 0.0

    def compute_s(self) -> float:
        return self.compute_total_s

    def comm_bytes(self) -> float:
        return self.comm_total_bytes


@dataclass(frozen=True, slots=True)
class _Kept:
    """What a repeating probe contributes to the report of any longer step, and nothing else: a
    sweep keeps many (one per GPU count, layout and folded copy, for every batch size), so the
    compute operations, compute spans and memory samples are dropped once read (about a tenth of
    the probe's size). Every report, fresh or from a kept probe, is made from one of these.

    ``size``: the probe's micro-batches; ``last_start``: when its last one begins; ``peak_late``:
    whether the memory peak is first reached in the last micro-batch; ``busy``: seconds each link
    was busy in the probe (copied before extending)."""

    plan: _CommPlan
    run: PlanRun
    period: _Period
    size: int
    last_start: float
    peak_late: bool
    busy: LinkBusy
    slopes: dict[int | None, float] | None = None


def _keep(probe: _Probe, period: _Period, slopes: dict[int | None, float] | None) -> _Kept:
    """``probe``, repeating with ``period``, reduced to what :func:`_report` reads."""
    plan, timed, starts = probe.plan, probe.timed, probe.starts
    run, memory = timed.run, timed.run.memory
    top = max((total for _, total, _ in memory.samples), default=0.0)  # before fragmentation, as sampled
    first_at = next((t for t, total, _ in memory.samples if total == top), 0.0)
    last_start = timed.starts[starts[-1]]
    comm = [op for op in plan.ops if op.stream == COMM]
    kept_plan = _CommPlan(
        plan.strategy, comm, plan.initial_memory, plan.fragmentation, plan.compute_s(), plan.comm_bytes()
    )
    kept_memory = replace(memory, samples=[], category_samples=None)
    kept_run = PlanRun(run.step_time_s, [s for s in run.spans if s.stream == COMM], kept_memory)
    return _Kept(
        kept_plan,
        kept_run,
        period,
        len(starts),
        last_start,
        first_at >= last_start,
        _busy(plan, timed),
        slopes,
    )


def _extrapolated(
    strategy: Strategy,
    ctx: StepContext,
    k: int,
    *,
    cluster: str,
    device: str,
    peak_flops: float,
    contention: _Contention,
    reuse: Hashable | None = None,
) -> Measured | None:
    # Per (strategy, one GPU): the probe size that worked last, or 0 when the plan is not built
    # micro-batch by micro-batch (DDP and ZeRO-1 run all but the last as one operation).
    key, caches = (strategy.name, ctx.gpus == 1), ctx.caches
    first = caches.first_probe.get(key, PROBES[0])
    known: _Kept | None = None if reuse is None else caches.probes.get((reuse, strategy.name, contention))  # type: ignore[assignment]
    if known is not None and first and first <= known.size < k:
        return _report(known, ctx, k, cluster=cluster, device=device, peak_flops=peak_flops)
    for size in (p for p in PROBES if first and first <= p <= k):
        probe = _probe(strategy, ctx, size, contention, size < k)
        if isinstance(probe, str):
            caches.first_probe[key] = 0
            return None
        if size == k:  # the probe is the whole step
            result = StepResult(probe.plan, probe.timed.run, [probe.timed.run.step_time_s])
            report = report_step(result, ctx, cluster=cluster, device=device, peak_flops=peak_flops)
            slope = _slope(_slopes(probe.plan, probe.timed, contention))
            return _measured(report, _busy(probe.plan, probe.timed), probe.timed, slope=slope)
        if probe.period is not None:
            caches.first_probe[key] = size
            kept = _keep(probe, probe.period, _slopes(probe.plan, probe.timed, contention))
            if reuse is not None:
                caches.probes.put((reuse, strategy.name, contention), kept)
            return _report(kept, ctx, k, cluster=cluster, device=device, peak_flops=peak_flops)
    return None


def _report(
    kept: _Kept, ctx: StepContext, k: int, *, cluster: str, device: str, peak_flops: float
) -> Measured:
    """The probe's report with ``k - size`` more middle micro-batches (fewer when negative)."""
    plan, run, period = kept.plan, kept.run, kept.period
    extra = k - kept.size
    step_s = run.step_time_s + extra * period.time_s
    result = StepResult(plan, run, [step_s])
    report = report_step(result, ctx, cluster=cluster, device=device, peak_flops=peak_flops)
    compute_s = plan.compute_s() + extra * period.compute_s
    busy = LinkBusy(dict(kept.busy.by_kind), dict(kept.busy.by_link))
    busy.add_times(period.busy, extra)
    report = replace(
        report,
        compute_s=compute_s,
        exposed_comm_s=max(0.0, step_s - compute_s),
        comm_s=report.comm_s + extra * period.comm_s,
        comm_bytes=plan.comm_bytes() + extra * period.comm_bytes,
        link_utilisation=busy.utilisation(step_s),
        bottleneck_link=busy.bottleneck(),
    )
    # The verdict names the peak's phase too: renumbered with it (a peak in the last micro-batch).
    phase = report.peak_phase
    if kept.peak_late:
        phase = phase_text(_renumbered(phase_of(run.memory.peak_key), kept.size, extra))  # type: ignore[arg-type]
    peak = MemoryPeak(report.peak_memory_bytes, phase, report.memory_breakdown, report.memory_capacity_bytes)
    report = replace(report, peak_phase=phase, oom_verdict=peak.verdict())
    # (the probe's micro-batches are numbered from 1: its repeating middle one is the one before the last)
    slope = _slope(kept.slopes, extra, kept.size - 1)
    return _measured(report, busy, run, (kept.last_start, kept.size, extra), slope)


def _probe(
    strategy: Strategy, ctx: StepContext, size: int, contention: _Contention, periodic: bool = True
) -> _Probe | str:
    """The plan of ``size`` micro-batches, evaluated (``"structure"`` if it is not built one
    micro-batch after another, as DDP's and ZeRO-1's are not); its period looked for only when
    ``periodic`` (a probe that is the whole step is reported as it is)."""
    probe_ctx = replace(
        ctx, config=replace(ctx.config, global_batch=ctx.gpus * ctx.config.micro_batch * size)
    )
    plan = strategy.build_plan(probe_ctx)
    if {op.stream for op in plan.ops} - {COMPUTE, COMM}:
        return "structure"
    starts = _microbatch_starts(plan)
    if len(starts) != size:
        return "structure"
    timed = _evaluate(plan, ctx, contention)
    return _Probe(plan, timed, starts, _period(plan, timed, starts) if periodic else None)


def _microbatch_starts(plan: StepPlan) -> list[int]:
    """Ids of the compute operations that begin a micro-batch: the first pass (forward, backward,
    recompute) of each micro-batch its key names; none where passes name no micro-batch."""
    starts: list[int] = []
    last: int | None = None
    for op in plan.ops:
        if op.stream != COMPUTE or op.kind not in _PASSES:
            continue
        micro = op.key.micro_batch
        if micro is not None and micro != last:
            starts.append(op.id)
        last = micro
    return starts


def _period(plan: StepPlan, timed: TimedRun, starts: list[int]) -> _Period | None:
    """One middle micro-batch's contribution, if the probe's last two middle micro-batches repeat."""
    ops, begin, end = plan.ops, timed.starts, timed.ends
    bounds = [*starts, len(ops)]
    a = len(starts) - 3  # the compared micro-batches: a and a + 1, before the last
    if a < 1:
        return None
    blocks = [range(bounds[m], bounds[m + 1]) for m in range(a - 1, a + 2)]  # one before, a, a + 1
    shift = bounds[a + 1] - bounds[a]
    middles = blocks[1:] if a == 1 else blocks  # the one before a must be a middle one too
    if any(len(block) != shift for block in middles):
        return None
    if not all(same_op(ops[i], ops[i + shift], shift) for block in middles[:-1] for i in block):
        return None
    at = [begin[s] for s in starts]
    tolerance = 1e-9 * max(timed.run.step_time_s, 1e-30)
    period = at[a + 1] - at[a]
    if abs((at[a + 2] - at[a + 1]) - period) > tolerance:
        return None
    for i in blocks[1]:
        if (
            abs(begin[i + shift] - begin[i] - period) > tolerance
            or abs(end[i + shift] - end[i] - period) > tolerance
        ):
            return None
    # Nothing of a micro-batch may still run when the one after next begins.
    if (
        max(end[i] for i in blocks[0]) > at[a + 1] + tolerance
        or max(end[i] for i in blocks[1]) > at[a + 2] + tolerance
    ):
        return None
    if not _memory_repeats(timed, at, a, tolerance):
        return None
    last = blocks[2]
    comm = [i for i in last if ops[i].stream == COMM]
    busy = LinkBusy()
    for i in comm:
        busy.add(ops[i].link_kind, ops[i].link, begin[i], end[i])
    return _Period(
        time_s=period,
        compute_s=math.fsum(ops[i].duration_s for i in last if ops[i].stream == COMPUTE),
        comm_s=math.fsum(end[i] - begin[i] for i in comm),
        comm_bytes=sum(ops[i].bytes for i in comm),
        busy=busy,
    )


def _memory_repeats(timed: TimedRun, at: list[float], a: int, tolerance: float) -> bool:
    """Whether the memory samples of micro-batches ``a`` and ``a + 1`` repeat, shifted by the period."""
    samples = timed.run.memory.samples
    times = [t for t, _, _ in samples]
    windows = [
        samples[bisect.bisect_left(times, at[m]) : bisect.bisect_left(times, at[m + 1])] for m in (a, a + 1)
    ]
    if len(windows[0]) != len(windows[1]):
        return False
    period = at[a + 1] - at[a]
    for (t0, total0, _), (t1, total1, _) in zip(*windows, strict=True):
        if abs(t1 - t0 - period) > tolerance or abs(total1 - total0) > 1e-9 * max(abs(total0), 1.0):
            return False
    return True


def _busy(plan: StepPlan, timed: TimedRun) -> LinkBusy:
    """Seconds each link kind and each link carried a collective in the run."""
    busy = LinkBusy()
    for op in plan.ops:
        if op.stream == COMM:
            busy.add(op.link_kind, op.link, timed.starts[op.id], timed.ends[op.id])
    return busy


def _renumbered(phase: Phase, size: int, extra: int) -> Phase:
    """``phase``, reached in the last micro-batch of a probe of ``size``, in a step of ``extra``
    more: the last two micro-batches' numbers move up by ``extra`` (the one before the last can
    still be communicating)."""
    compute, comm = phase
    return (_shifted(compute, size, extra), _shifted(comm, size, extra))


def _shifted(part: PhasePart | None, size: int, extra: int) -> PhasePart | None:
    if part is None:
        return None
    label, key = part
    micro = key.micro_batch
    if micro is None or micro < size - 1:
        return part
    return (label, OpKey(key.group, micro + extra, key.block, key.stage))
