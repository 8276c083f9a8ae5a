"""Run a :class:`~simcore.step.plan.StepPlan` without SimPy: same times, same memory peak.

:func:`evaluate_plan` is a list scheduler in time order. Each stream issues its operations in
order; an operation starts once its stream is free and the operations it waits for have ended
(``after``) or started (``after_start``). Contention couples a rank's streams, as in
:func:`simcore.step.des.run_plan`, and is applied piecewise whenever the rank's state
changes (each rate is read when the affected work resumes):

- uniform (``slowdown`` a number): compute runs at 1/slowdown of its speed while a communication
  operation of its rank is in flight; a collective lasts its own time;
- per collective (``slowdown=None``): compute runs at 1/``Op.contention`` of the collective in
  flight, and a collective progresses at 1/``comm_slowdown`` of its speed while its rank computes.

The result is bit for bit run_plan's: the times are computed with the same floating-point
expressions (:meth:`_Evaluator.rate` mirrors ``_compute_rate`` and ``_comm_rate``; a new
contention term in run_plan belongs there, and the exact-match tests catch any drift).

The memory timeline is order-sensitive when allocations and frees of different streams fall on
the same instant (the peak sees whichever comes first), so the scheduler dispatches work at equal
times in the order SimPy would: a stream continues synchronously as far as it can; a stream woken
by another operation's start or end resumes after everything already scheduled for that instant;
a wait on several operations, or work whose rate can change while it runs, costs one more hand-off
(SimPy's condition events); every change of a rank's state (communication or, per collective,
compute starting or stopping) wakes that rank's rate-coupled work one hand-off later. Dispatch is a binary heap of (time, priority, sequence), as in SimPy's own
queue, but with plain callbacks instead of event objects and generators: several times faster.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from simcore.compute.memory import MemoryTimeline
from simcore.errors import TrainsimError
from simcore.step.plan import (
    START_OF_STEP,
    Op,
    PlanRun,
    Span,
    StepPlan,
    is_comm_stream,
    new_span,
    phase_label,
    rank_of_stream,
)

__all__ = ["TimedRun", "evaluate_plan", "evaluate_plan_timed"]

_URGENT, _NORMAL = 0, 1  # SimPy's priorities: a process's first step runs before anything else
# What a queue entry does when dispatched (entries are (time, priority, sequence, code, a, b)).
_INIT, _PROGRESS_DONE, _COMM_DONE, _ENDED, _STARTED, _CHANGED, _RESUME = range(7)
# What a stream is doing with its current operation: waiting for its dependencies, working at a
# rate that contention may change (compute, or a collective slowed by compute), or a collective
# at its own speed.
_NEXT, _WAITING, _PROGRESSING, _COMMUNICATING = range(4)


class _AllOf:
    """A stream waiting on several operations: resumed one hand-off after the last (SimPy's AllOf)."""

    __slots__ = ("count", "stream")

    def __init__(self, stream: int, count: int) -> None:
        self.stream, self.count = stream, count


class _Rank:
    """One process's coupling of its streams: communication in flight and the compute running."""

    __slots__ = ("comm_active", "comm_factor", "computing", "current_compute", "current_op", "waiting")

    def __init__(self) -> None:
        self.comm_active = 0
        self.comm_factor = 1.0  # the running collective's contention (per-collective mode)
        self.computing = False  # per-collective mode: a compute operation is running
        self.current_compute = START_OF_STEP
        self.current_op: Op | None = None  # the compute operation that last began (None: none yet)
        self.waiting: list[tuple[int, int]] = []  # (stream, segment) rate-coupled work awaiting a change


class _Stream:
    """One stream's progress through its operations."""

    __slots__ = (
        "communicates",
        "finished_segment",
        "fired_segment",
        "index",
        "key",
        "label",
        "ops",
        "phase",
        "rank",
        "rate",
        "remaining",
        "scale",
        "segment",
        "segment_start",
        "start",
        "tolerance",
    )

    def __init__(self, ops: list[Op], rank: _Rank, communicates: bool, scale: float) -> None:
        self.ops, self.rank, self.communicates, self.scale = ops, rank, communicates, scale
        self.index, self.phase = 0, _NEXT
        self.start = self.remaining = self.tolerance = self.rate = self.segment_start = 0.0
        self.label = ""  # the memory phase of the running operation, fixed when it starts
        # ... and as operations: (the compute running, the collective changing memory or None)
        self.key: tuple[Op | None, Op | None] = (None, None)
        self.segment = self.fired_segment = self.finished_segment = 0


class _Evaluator:
    def __init__(
        self,
        plan: StepPlan,
        memory: MemoryTimeline,
        slowdown: float | None,
        compute_scale: float | Mapping[str, float],
        comm_slowdown: float = 1.0,
    ) -> None:
        self.plan, self.memory = plan, memory
        # The same settings as run_plan's _Runner: per-collective contention when slowdown is None.
        self.per_op = slowdown is None
        self.slowdown = 1.0 if slowdown is None else slowdown
        self.comm_slowdown = comm_slowdown if self.per_op else 1.0
        self.comm_coupled = self.comm_slowdown != 1.0
        self.coupled = self.per_op or self.slowdown != 1.0
        self.now = 0.0
        self.queue: list[tuple[float, int, int, int, Any, int]] = []
        # Entries due now (delay 0, normal priority), in the order scheduled: SimPy would put them
        # on its heap at (now, NORMAL, sequence); a FIFO beside the heap gives the same order.
        self.instant: deque[tuple[int, int, Any, int]] = deque()
        self.sequence = 0
        n = len(plan.ops)
        # Waiters on an operation's end/start; None where nobody waits (no event, as in run_plan).
        self.on_end: list[list[Any] | None] = [None] * n
        self.on_start: list[list[Any] | None] = [None] * n
        for op in plan.ops:
            for i in op.after:
                self.on_end[i] = []
            for i in op.after_start:
                self.on_start[i] = []
        self.ended = [False] * n  # dispatched (SimPy's ``processed``)
        self.started = [False] * n
        self.starts = [0.0] * n
        self.ends = [0.0] * n
        self.finished: list[int] = []  # operation ids in the order they ended
        self.end = 0.0
        ranks: dict[str, _Rank] = {}
        self.streams: list[_Stream] = []
        by_stream: dict[str, list[Op]] = {}
        for op in plan.ops:
            by_stream.setdefault(op.stream, []).append(op)
        for name, ops in by_stream.items():  # first-appearance order, as run_plan starts them
            prefix = rank_of_stream(name)
            rank = ranks.setdefault(prefix, _Rank())
            scale = (
                float(compute_scale.get(prefix, 1.0)) if isinstance(compute_scale, Mapping) else compute_scale
            )
            self.streams.append(_Stream(ops, rank, is_comm_stream(name), scale))
        self.running = len(self.streams)

    def schedule(self, code: int, a: Any, b: int = 0, delay: float = 0.0, priority: int = _NORMAL) -> None:
        self.sequence = sequence = self.sequence + 1
        if delay == 0.0 and priority == _NORMAL:
            self.instant.append((sequence, code, a, b))
        else:
            heapq.heappush(self.queue, (self.now + delay, priority, sequence, code, a, b))

    def run(self) -> float:
        for index in range(len(self.streams)):
            self.schedule(_INIT, index, priority=_URGENT)
        streams, queue, instant = self.streams, self.queue, self.instant
        pop, popleft, advance = heapq.heappop, instant.popleft, self.advance
        while self.running:
            # The next entry in SimPy's order, (time, priority, sequence), over the heap and the FIFO.
            if instant and (
                not queue
                or queue[0][0] > self.now
                or queue[0][1] > _NORMAL
                or (queue[0][1] == _NORMAL and queue[0][2] > instant[0][0])
            ):
                _, code, a, b = popleft()
            elif queue:
                self.now, _, _, code, a, b = pop(queue)
            else:
                raise TrainsimError(
                    f"step plan {self.plan.strategy!r} deadlocks: an operation waits for one that never "
                    "runs (check its after/after_start dependencies)"
                )
            if code == _RESUME:
                advance(a)
            elif code == _PROGRESS_DONE:
                stream = streams[a]
                if b != stream.segment:
                    continue  # a segment re-planned when the rank's state changed
                if not self.coupled:
                    self._finish(stream)
                    advance(a)
                    continue
                stream.finished_segment = b
                if stream.fired_segment != b and not instant and (not queue or queue[0][0] > self.now):
                    # The wake-up would be the very next entry: run it now (same order, no queueing).
                    stream.fired_segment = b
                    advance(a)
                else:
                    self._fire(a, b)
            elif code == _COMM_DONE:
                self._complete(streams[a])
                advance(a)
            elif code == _CHANGED:
                for stream_index, segment in a:
                    self._fire(stream_index, segment)
            elif code == _INIT:
                advance(a)
            else:  # an operation ended or started: wake what waits on it, in the order it began to
                if code == _ENDED:
                    self.ended[a] = True
                    waiters = self.on_end[a]
                else:
                    self.started[a] = True
                    waiters = self.on_start[a]
                for waiter in waiters or ():
                    if isinstance(waiter, _AllOf):
                        waiter.count -= 1
                        if not waiter.count:
                            self.schedule(_RESUME, waiter.stream)
                    else:
                        advance(waiter)
        return self.end

    def _fire(self, index: int, segment: int) -> None:
        """A rate-coupled segment's wait (its end or a change of the rank, SimPy's AnyOf) is over."""
        stream = self.streams[index]
        if segment == stream.segment and stream.fired_segment != segment:
            stream.fired_segment = segment
            self.sequence = sequence = self.sequence + 1  # self.schedule(_RESUME, index), inlined
            self.instant.append((sequence, _RESUME, index, 0))

    # --- one stream -----------------------------------------------------------------------------
    def advance(self, index: int) -> None:
        """Carry the stream on from where it stopped until it has to wait (or is done)."""
        stream = self.streams[index]
        ops, ended, started = stream.ops, self.ended, self.started
        while stream.index < len(ops):
            op = ops[stream.index]
            phase = stream.phase
            if phase == _NEXT:
                after, after_start = op.after, op.after_start
                if after_start:
                    pending = [i for i in after if not ended[i]]
                    pending += [-1 - i for i in after_start if not started[i]]
                    if pending:
                        self._wait(index, pending)
                        return
                elif after:
                    if len(after) == 1:  # most operations wait for one: no list unless it is pending
                        if not ended[after[0]]:
                            self._wait(index, [after[0]])
                            return
                    else:
                        pending = [i for i in after if not ended[i]]
                        if pending:
                            self._wait(index, pending)
                            return
            elif phase == _PROGRESSING:
                if stream.finished_segment != stream.segment:
                    stream.remaining -= (self.now - stream.segment_start) * stream.rate
                    if self._segment(index, stream):
                        return
                self._complete(stream)
                continue
            if self._begin(index, stream, op):
                return
            self._complete(stream)
        self.running -= 1
        if self.now > self.end:
            self.end = self.now

    def _wait(self, index: int, pending: list[int]) -> None:
        """Wait for operations' ends (ids >= 0) and starts (encoded -1 - id)."""
        self.streams[index].phase = _WAITING
        waiter: Any = index if len(pending) == 1 else _AllOf(index, len(pending))
        for code in pending:
            waiters = self.on_end[code] if code >= 0 else self.on_start[-1 - code]
            waiters.append(waiter)  # type: ignore[union-attr]

    def _begin(self, index: int, stream: _Stream, op: Op) -> bool:
        """Start ``op``; True when the stream now waits for it to end."""
        now = self.now
        stream.start = self.starts[op.id] = now
        if self.on_start[op.id] is not None:  # self.schedule(_STARTED, op.id), inlined
            self.sequence = sequence = self.sequence + 1
            self.instant.append((sequence, _STARTED, op.id, 0))
        rank = stream.rank
        if stream.communicates:
            # Memory changed by a collective is attributed to the compute running at that moment
            # (the label is only spelled out where the collective changes memory).
            if op.on_start or op.on_end or op.after_end:
                stream.label = phase_label(rank.current_compute, op.name)
                stream.key = (rank.current_op, op)
        else:
            rank.current_compute = stream.label = op.name
            rank.current_op = op
            stream.key = (op, None)
        if op.on_start:
            self.memory.apply(op.on_start, stream.label, now, stream.key)
        if not stream.communicates:
            if self.per_op:
                rank.computing = True
                if rank.waiting:
                    self._notify(rank)
            work = op.duration_s * stream.scale
            stream.remaining, stream.tolerance = work, 1e-12 * work
            return self._segment(index, stream)
        if op.duration_s > 0:
            self._toggle(rank, +1, op.contention)
            if self.comm_coupled:
                stream.remaining, stream.tolerance = op.duration_s, 1e-12 * op.duration_s
                return self._segment(index, stream)
            stream.phase = _COMMUNICATING
            # self.schedule(_COMM_DONE, index, delay=op.duration_s), inlined (the delay is positive)
            self.sequence = sequence = self.sequence + 1
            heapq.heappush(self.queue, (now + op.duration_s, _NORMAL, sequence, _COMM_DONE, index, 0))
            return True
        return False

    def rate(self, stream: _Stream) -> float:
        """How fast the stream's work progresses now (run_plan's ``_compute_rate``/``_comm_rate``)."""
        rank = stream.rank
        if stream.communicates:
            return 1.0 / self.comm_slowdown if rank.computing else 1.0
        if not rank.comm_active:
            return 1.0
        return 1.0 / (rank.comm_factor if self.per_op else self.slowdown)

    def _segment(self, index: int, stream: _Stream) -> bool:
        """Run the operation's remaining work at the current rate; True while it is not finished."""
        if not stream.remaining > stream.tolerance:
            return False
        rate = self.rate(stream)  # the rate rule, written once
        stream.rate, stream.segment_start, stream.phase = rate, self.now, _PROGRESSING
        stream.segment = segment = stream.segment + 1
        # self.schedule(_PROGRESS_DONE, index, segment, delay=...), inlined: the hottest call
        self.sequence = sequence = self.sequence + 1
        delay = stream.remaining / rate
        if delay == 0.0:
            self.instant.append((sequence, _PROGRESS_DONE, index, segment))
        else:
            heapq.heappush(self.queue, (self.now + delay, _NORMAL, sequence, _PROGRESS_DONE, index, segment))
        if self.coupled:
            stream.rank.waiting.append((index, segment))
        return True

    def _notify(self, rank: _Rank) -> None:
        """The rank's state changed: its rate-coupled work re-reads its rate (SimPy's ``changed``)."""
        if rank.waiting:  # nobody can start waiting on this change any more: skip it if nobody does
            self.sequence = sequence = self.sequence + 1  # self.schedule(_CHANGED, ...), inlined
            self.instant.append((sequence, _CHANGED, rank.waiting, 0))
            rank.waiting = []

    def _toggle(self, rank: _Rank, delta: int, factor: float = 1.0) -> None:
        rank.comm_active += delta
        rank.comm_factor = factor if delta > 0 else 1.0
        self._notify(rank)

    def _complete(self, stream: _Stream) -> None:
        """The running operation's work is done: release the rank's state, then finish it."""
        if stream.communicates:
            if stream.ops[stream.index].duration_s > 0:
                self._toggle(stream.rank, -1)
        elif self.per_op:
            rank = stream.rank
            rank.computing = False
            if rank.waiting:
                self._notify(rank)
        self._finish(stream)

    def _finish(self, stream: _Stream) -> None:
        op = stream.ops[stream.index]
        now, label = self.now, stream.label
        self.ends[op.id] = now
        self.finished.append(op.id)
        if op.on_end:
            self.memory.apply(op.on_end, label, now, stream.key)
        if op.after_end:
            self.memory.apply(op.after_end, label, now, stream.key)
        if self.on_end[op.id] is not None:  # self.schedule(_ENDED, op.id), inlined
            self.sequence = sequence = self.sequence + 1
            self.instant.append((sequence, _ENDED, op.id, 0))
        stream.index += 1
        stream.phase = _NEXT


@dataclass(slots=True)
class TimedRun:
    """A plan's run plus when each operation started and ended (indexed by operation id)."""

    run: PlanRun
    starts: list[float]
    ends: list[float]


def evaluate_plan_timed(
    plan: StepPlan,
    *,
    capacity_bytes: float,
    slowdown: float | None = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
    comm_slowdown: float = 1.0,
    comm_spans_only: bool = False,
    phase_peaks: bool = False,
) -> TimedRun:
    """:func:`evaluate_plan`, also returning every operation's start and end time.

    ``comm_spans_only`` keeps only the spans of communication streams (all a
    :class:`~simcore.report.StepReport` reads; a trace wants them all); ``phase_peaks`` has the
    memory timeline keep each phase's largest footprint.
    """
    memory = MemoryTimeline(
        capacity_bytes,
        plan.fragmentation,
        phase_peaks={} if phase_peaks else None,
        category_samples=None if comm_spans_only else [],  # a trace: memory by category too
    )
    memory.apply(plan.initial_memory.items(), START_OF_STEP, 0.0, (None, None))
    evaluator = _Evaluator(plan, memory, slowdown, compute_scale, comm_slowdown)
    step_time = evaluator.run() if evaluator.streams else 0.0
    spans = _spans(plan, evaluator, comm_spans_only)
    return TimedRun(PlanRun(step_time, spans, memory), evaluator.starts, evaluator.ends)


def evaluate_plan(
    plan: StepPlan,
    *,
    capacity_bytes: float,
    slowdown: float | None = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
    comm_slowdown: float = 1.0,
) -> PlanRun:
    """``plan`` evaluated without SimPy; the same :class:`PlanRun` as :func:`run_plan` from time 0.

    Arguments as :func:`simcore.step.des.run_plan` (``compute_scale`` one factor or one
    per rank prefix; ``slowdown=None`` with ``comm_slowdown``: per-collective contention).
    """
    return evaluate_plan_timed(
        plan,
        capacity_bytes=capacity_bytes,
        slowdown=slowdown,
        compute_scale=compute_scale,
        comm_slowdown=comm_slowdown,
    ).run


def _spans(plan: StepPlan, evaluator: _Evaluator, comm_only: bool) -> list[Span]:
    """Spans as run_plan records them: in the order operations ended, then sorted by (start, end)."""
    starts, ends = evaluator.starts, evaluator.ends
    ops = (plan.ops[i] for i in evaluator.finished)
    kept = {name for name in {op.stream for op in plan.ops} if not comm_only or is_comm_stream(name)}
    spans = [
        new_span(op.stream, op.name, op.kind, starts[op.id], ends[op.id], op.bytes, op.link_kind)
        for op in ops
        if op.stream in kept
    ]
    spans.sort(key=_span_order)
    return spans


# (start, end): how run_plan orders its spans (a C-level key: plans sort thousands of spans)
_span_order = attrgetter("start_s", "end_s")
