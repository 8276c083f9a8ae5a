"""Run a :class:`~simcore.strategies.schedule.StepPlan` without SimPy: same times, same memory peak.

:func:`evaluate_plan` is a list scheduler in time order. Each stream issues its operations in
order; an operation starts once its stream is free and the operations it waits for have ended
(``after``) or started (``after_start``); a communication operation lasts its collective time; a
compute operation's work runs at 1/slowdown of its speed while a communication operation of its
rank is in flight, applied piecewise whenever communication starts or stops. That is the model of
:func:`simcore.strategies.schedule.run_plan`, and the result is bit for bit the same: the times are
computed with the same floating-point expressions.

The memory timeline is order-sensitive when allocations and frees of different streams fall on
the same instant (the peak sees whichever comes first), so the scheduler dispatches work at equal
times in the order SimPy would: a stream continues synchronously as far as it can; a stream woken
by another operation's start or end resumes after everything already scheduled for that instant;
a wait on several operations, or compute slowed by communication, costs one more hand-off (SimPy's
condition events). Dispatch is a binary heap of (time, priority, sequence), as in SimPy's own
queue, but with plain callbacks instead of event objects and generators: several times faster.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simcore.compute.memory import MemoryTimeline
from simcore.errors import TrainsimError
from simcore.strategies.schedule import Op, PlanRun, Span, StepPlan, is_comm_stream, rank_of_stream

__all__ = ["TimedRun", "evaluate_plan", "evaluate_plan_timed"]

_URGENT, _NORMAL = 0, 1  # SimPy's priorities: a process's first step runs before anything else


class _Event:
    """Something streams wait on: the start or end of an operation, or a rank's comm toggling.

    ``callbacks`` is None once the event has been dispatched (SimPy's ``processed``).
    """

    __slots__ = ("callbacks",)

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] | None = []


class _Condition(_Event):
    """SimPy's AllOf/AnyOf: dispatched one hand-off after ``needed`` of its events were."""

    __slots__ = ("count", "fired", "needed", "owner")

    def __init__(self, owner: _Evaluator, needed: int) -> None:
        super().__init__()
        self.owner, self.needed, self.count, self.fired = owner, needed, 0, False

    def check(self) -> None:
        if self.fired:
            return
        self.count += 1
        if self.count >= self.needed:
            self.fired = True
            self.owner.schedule(self)


class _Rank:
    """One process's coupling of its streams: communication in flight and the compute running."""

    __slots__ = ("changed", "comm_active", "current_compute")

    def __init__(self) -> None:
        self.changed = _Event()
        self.comm_active = 0
        self.current_compute = "start of step"


class _Stream:
    """One stream's progress: the operation it is on and what it is doing with it."""

    __slots__ = (
        "communicates",
        "finish",
        "index",
        "label",
        "ops",
        "phase",
        "rank",
        "rate",
        "remaining",
        "scale",
        "segment_start",
        "start",
        "tolerance",
    )

    def __init__(self, ops: list[Op], rank: _Rank, communicates: bool, scale: float) -> None:
        self.ops, self.rank, self.communicates, self.scale = ops, rank, communicates, scale
        self.index = 0
        self.start = 0.0
        self.phase = ""  # "" (next op), "waiting", "compute", "comm" or "end" (finishing)
        self.label = ""  # the memory phase of the running operation, fixed when it starts
        self.remaining = self.tolerance = self.rate = self.segment_start = 0.0
        self.finish: _Event | None = None


class _Evaluator:
    def __init__(
        self, plan: StepPlan, memory: MemoryTimeline, slowdown: float, compute_scale: float | Mapping[str, float]
    ) -> None:
        self.plan, self.memory, self.slowdown = plan, memory, slowdown
        self.now = 0.0
        self.queue: list[tuple[float, int, int, _Event]] = []
        self.sequence = 0
        awaited_start = {i for op in plan.ops for i in op.after_start}
        awaited_end = {i for op in plan.ops for i in op.after}
        self.started: list[_Event | None] = [_Event() if op.id in awaited_start else None for op in plan.ops]
        self.done: list[_Event | None] = [_Event() if op.id in awaited_end else None for op in plan.ops]
        self.spans: list[Span] = []
        self.starts = [0.0] * len(plan.ops)
        self.ends = [0.0] * len(plan.ops)
        self.end = 0.0
        self.running = 0
        ranks: dict[str, _Rank] = {}
        self.streams: list[_Stream] = []
        by_stream: dict[str, list[Op]] = {}
        for op in plan.ops:
            by_stream.setdefault(op.stream, []).append(op)
        for name, ops in by_stream.items():  # first-appearance order, as run_plan starts them
            prefix = rank_of_stream(name)
            rank = ranks.setdefault(prefix, _Rank())
            if isinstance(compute_scale, Mapping):
                scale = float(compute_scale.get(prefix, 1.0))
            else:
                scale = compute_scale
            self.streams.append(_Stream(ops, rank, is_comm_stream(name), scale))

    # --- the dispatch queue -------------------------------------------------------------------
    def schedule(self, event: _Event, delay: float = 0.0, priority: int = _NORMAL) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (self.now + delay, priority, self.sequence, event))

    def timeout(self, delay: float) -> _Event:
        event = _Event()
        self.schedule(event, delay)
        return event

    @staticmethod
    def wait(event: _Event, resume: Callable[[], None]) -> None:
        """Call ``resume`` when ``event`` is dispatched (it has not been yet)."""
        event.callbacks.append(resume)  # type: ignore[union-attr]

    def run(self) -> float:
        for stream in self.streams:
            first = _Event()
            first.callbacks = [lambda s=stream: self.advance(s)]  # type: ignore[misc]
            self.schedule(first, priority=_URGENT)
            self.running += 1
        queue = self.queue
        while self.running:
            if not queue:
                raise TrainsimError(
                    f"step plan {self.plan.strategy!r} deadlocks: an operation waits for one that never "
                    "runs (check its after/after_start dependencies)"
                )
            self.now, _, _, event = heapq.heappop(queue)
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks or ():
                callback()
        return self.end

    # --- one stream -----------------------------------------------------------------------------
    def advance(self, stream: _Stream) -> None:
        """Start the stream's next operations until one has to wait (or the stream is done)."""
        while stream.index < len(stream.ops):
            op = stream.ops[stream.index]
            if not stream.phase:
                pending = [ev for ev in self._waits(op) if ev.callbacks is not None]
                stream.phase = "waiting"
                if pending:
                    self._wait_all(pending, stream)
                    return
            if stream.phase == "waiting":
                if self._begin(stream, op):
                    return
            elif stream.phase == "compute":
                if self._compute_resumed(stream):
                    return
            self._finish(stream, op)
        self.running -= 1
        if self.now > self.end:
            self.end = self.now

    def _waits(self, op: Op) -> list[_Event]:
        waits = [self.done[i] for i in op.after] + [self.started[i] for i in op.after_start]
        return [ev for ev in waits if ev is not None]

    def _wait_all(self, pending: list[_Event], stream: _Stream) -> None:
        def resume() -> None:
            self.advance(stream)

        if len(pending) == 1:
            self.wait(pending[0], resume)
            return
        condition = _Condition(self, len(pending))
        for event in pending:
            self.wait(event, condition.check)
        self.wait(condition, resume)

    def _begin(self, stream: _Stream, op: Op) -> bool:
        """Start ``op``; True when the stream now waits for it to end."""
        stream.start = self.starts[op.id] = self.now
        started = self.started[op.id]
        if started is not None:
            self.schedule(started)
        rank = stream.rank
        if not stream.communicates:
            rank.current_compute = op.name
        # Memory changed by a collective is attributed to the compute running at that moment.
        label = f"{rank.current_compute} ({op.name})" if stream.communicates else op.name
        stream.label = label
        if op.on_start:
            self.memory.apply(op.on_start, label, self.now)
        if not stream.communicates:
            work = op.duration_s * stream.scale
            stream.remaining, stream.tolerance = work, 1e-12 * work
            stream.phase = "compute"
            return self._compute_segment(stream)
        if op.duration_s > 0:
            self._toggle(rank, +1)
            stream.phase = "comm"
            self.wait(self.timeout(op.duration_s), lambda: self._comm_done(stream))
            return True
        stream.phase = "end"
        return False

    def _compute_segment(self, stream: _Stream) -> bool:
        """Run the compute's remaining work at the current rate; True while it is not finished."""
        if not stream.remaining > stream.tolerance:
            stream.phase = "end"
            return False
        rank = stream.rank
        rate = 1.0 / self.slowdown if rank.comm_active else 1.0
        stream.rate, stream.segment_start = rate, self.now
        finish = stream.finish = self.timeout(stream.remaining / rate)
        if self.slowdown == 1.0:
            self.wait(finish, lambda: self._compute_done(stream))
            return True
        # Wait for the work to finish or the rank's communication to start or stop (SimPy's AnyOf).
        condition = _Condition(self, 1)
        self.wait(finish, condition.check)
        self.wait(rank.changed, condition.check)
        self.wait(condition, lambda: self.advance(stream))
        return True

    def _compute_resumed(self, stream: _Stream) -> bool:
        """Woken while computing: done if the work finished, else re-plan the rest at the new rate."""
        if stream.finish is None or stream.finish.callbacks is None:
            stream.phase = "end"
            return False
        stream.remaining -= (self.now - stream.segment_start) * stream.rate
        return self._compute_segment(stream)

    def _compute_done(self, stream: _Stream) -> None:
        stream.phase = "end"
        self.advance(stream)

    def _comm_done(self, stream: _Stream) -> None:
        self._toggle(stream.rank, -1)
        stream.phase = "end"
        self.advance(stream)

    def _toggle(self, rank: _Rank, delta: int) -> None:
        rank.comm_active += delta
        changed, rank.changed = rank.changed, _Event()
        if changed.callbacks:  # nobody can start waiting on it any more: skip it if nobody does
            self.schedule(changed)

    def _finish(self, stream: _Stream, op: Op) -> None:
        now, label = self.now, stream.label
        self.ends[op.id] = now
        self.spans.append(Span(op.stream, op.name, op.kind, stream.start, now, op.bytes, op.link_kind))
        if op.on_end:
            self.memory.apply(op.on_end, label, now)
        if op.after_end:
            self.memory.apply(op.after_end, label, now)
        done = self.done[op.id]
        if done is not None:
            self.schedule(done)
        stream.index += 1
        stream.phase = ""


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
    slowdown: float = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
) -> TimedRun:
    """:func:`evaluate_plan`, also returning every operation's start and end time."""
    memory = MemoryTimeline(capacity_bytes)
    memory.apply(plan.initial_memory.items(), "start of step", 0.0)
    evaluator = _Evaluator(plan, memory, slowdown, compute_scale)
    step_time = evaluator.run() if evaluator.streams else 0.0
    spans = sorted(evaluator.spans, key=_span_order)
    return TimedRun(PlanRun(step_time, spans, memory), evaluator.starts, evaluator.ends)


def evaluate_plan(
    plan: StepPlan,
    *,
    capacity_bytes: float,
    slowdown: float = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
) -> PlanRun:
    """``plan`` evaluated without SimPy; the same :class:`PlanRun` as :func:`run_plan` from time 0.

    Arguments as :func:`simcore.strategies.schedule.run_plan` (``compute_scale`` one factor or one
    per rank prefix).
    """
    return evaluate_plan_timed(
        plan, capacity_bytes=capacity_bytes, slowdown=slowdown, compute_scale=compute_scale
    ).run


def _span_order(span: Span) -> tuple[Any, ...]:
    return (span.start_s, span.end_s)
