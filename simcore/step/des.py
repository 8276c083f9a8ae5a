"""The discrete-event evaluator: a step plan's streams as SimPy processes in one simulation.

Each stream is a process that runs its operations in order, like a CUDA stream: an operation
starts once the operations it waits for have ended (``after``) or started (``after_start``).

Contention, both ways: while a communication operation of a rank runs, that rank's compute
progresses at 1/slowdown of its speed (NCCL kernels take SMs and memory bandwidth from concurrent
compute), and, with per-collective contention (``slowdown=None``), each collective carries its own
factor (``Op.contention``, from the SMs its channels occupy: :meth:`StepContext.contention`) while
compute running beside a collective slows it by ``comm_slowdown`` (the GEMM's blocks and HBM
traffic delay the NCCL kernel's). Both are applied exactly, piecewise, whenever either starts or
stops. Otherwise collectives take the uncontended time: with a single communication stream per
rank and every rank doing the same thing (homogeneous synchronous data parallelism), one
collective at a time has the fabric to itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.memory import MemoryTimeline
from simcore.engine import Simulation
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

# simpy: here for type names only (importing them would slow every --help)
if TYPE_CHECKING:
    import simpy

__all__ = ["run_plan"]


@dataclass(slots=True)
class _RankState:
    """What couples one rank's streams: its communication in flight and the compute running."""

    changed: simpy.Event
    comm_active: int = 0
    current_compute: str = START_OF_STEP
    current_op: Op | None = None  # the compute operation that last began
    comm_factor: float = 1.0  # the running collective's contention factor (per-collective mode)
    computing: bool = False


class _Runner:
    """The processes of one plan run inside a simulation."""

    def __init__(
        self,
        sim: Simulation,
        plan: StepPlan,
        memory: MemoryTimeline,
        slowdown: float | None,
        compute_scale: float | Mapping[str, float],
        comm_slowdown: float = 1.0,
    ) -> None:
        self.env = sim.env
        self.plan = plan
        self.memory = memory
        self.per_op = slowdown is None
        self.slowdown = 1.0 if slowdown is None else slowdown
        self.comm_slowdown = comm_slowdown if self.per_op else 1.0
        self.coupled = self.per_op or self.slowdown != 1.0
        self.compute_scale = compute_scale
        # Events only for operations something waits on: most operations are waited on by none.
        awaited_start = {i for op in plan.ops for i in op.after_start}
        awaited_end = {i for op in plan.ops for i in op.after}
        self.started: list[simpy.Event | None] = [
            self.env.event() if op.id in awaited_start else None for op in plan.ops
        ]
        self.done: list[simpy.Event | None] = [
            self.env.event() if op.id in awaited_end else None for op in plan.ops
        ]
        self.spans: list[Span] = []
        self.ranks: dict[str, _RankState] = {}
        self.t0 = float(self.env.now)

    def _rank(self, stream: str) -> _RankState:
        key = rank_of_stream(stream)
        state = self.ranks.get(key)
        if state is None:
            state = self.ranks[key] = _RankState(self.env.event())
        return state

    def _scale(self, stream: str) -> float:
        if isinstance(self.compute_scale, Mapping):
            return float(self.compute_scale.get(rank_of_stream(stream), 1.0))
        return self.compute_scale

    def _notify(self, rank: _RankState) -> None:
        changed, rank.changed = rank.changed, self.env.event()
        changed.succeed()

    def _toggle_comm(self, rank: _RankState, delta: int, factor: float = 1.0) -> None:
        rank.comm_active += delta
        rank.comm_factor = factor if delta > 0 else 1.0
        self._notify(rank)

    def _compute_rate(self, rank: _RankState) -> float:
        if not rank.comm_active:
            return 1.0
        return 1.0 / (rank.comm_factor if self.per_op else self.slowdown)

    def _progress(
        self, rank: _RankState, work_s: float, rate_of: Callable[[_RankState], float]
    ) -> simpy.events.ProcessGenerator:
        """Advance ``work_s`` seconds of work at the rank's current rate, re-reading it on changes."""
        remaining = work_s
        tolerance = 1e-12 * work_s
        while remaining > tolerance:
            rate = rate_of(rank)
            start = self.env.now
            finish = self.env.timeout(remaining / rate)
            if not self.coupled:
                yield finish
                return
            yield finish | rank.changed
            if finish.processed:
                return
            remaining -= (self.env.now - start) * rate

    def _compute(self, rank: _RankState, work_s: float) -> simpy.events.ProcessGenerator:
        if self.per_op:
            rank.computing = True
            self._notify(rank)
        yield from self._progress(rank, work_s, self._compute_rate)
        if self.per_op:
            rank.computing = False
            self._notify(rank)

    def _comm_rate(self, rank: _RankState) -> float:
        return 1.0 / self.comm_slowdown if rank.computing else 1.0

    def stream(self, name: str, ops: list[Op]) -> simpy.events.ProcessGenerator:
        env = self.env
        rank = self._rank(name)
        communicates = is_comm_stream(name)
        scale = self._scale(name)
        for op in ops:
            waits = [self.done[i] for i in op.after] + [self.started[i] for i in op.after_start]
            pending = [ev for ev in waits if ev is not None and not ev.processed]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield env.all_of(pending)
            start = float(env.now)
            started = self.started[op.id]
            if started is not None:
                started.succeed()
            if not communicates:
                rank.current_compute, rank.current_op = op.name, op
            # Memory changed by a collective is attributed to the compute running at that moment.
            phase = phase_label(rank.current_compute, op.name) if communicates else op.name
            key = (rank.current_op, op) if communicates else (op, None)
            if op.on_start:
                self.memory.apply(op.on_start, phase, start - self.t0, key)
            if not communicates:
                yield from self._compute(rank, op.duration_s * scale)
            elif op.duration_s > 0:
                self._toggle_comm(rank, +1, op.contention)
                if self.comm_slowdown != 1.0:
                    yield from self._progress(rank, op.duration_s, self._comm_rate)
                else:
                    yield env.timeout(op.duration_s)
                self._toggle_comm(rank, -1)
            end = float(env.now)
            self.spans.append(
                new_span(op.stream, op.name, op.kind, start - self.t0, end - self.t0, op.bytes, op.link_kind)
            )
            if op.on_end:
                self.memory.apply(op.on_end, phase, end - self.t0, key)
            if op.after_end:
                self.memory.apply(op.after_end, phase, end - self.t0, key)
            done = self.done[op.id]
            if done is not None:
                done.succeed()


def run_plan(
    sim: Simulation,
    plan: StepPlan,
    *,
    capacity_bytes: float,
    slowdown: float | None = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
    comm_slowdown: float = 1.0,
) -> PlanRun:
    """Run ``plan`` from the simulation's current time until every stream has finished.

    ``compute_scale`` multiplies compute durations (a slow or jittery step): one factor for all, or
    a factor per rank prefix (``{"": 1.0, "rank3": 2.0}``, missing ranks 1). Streams start in the
    order they first appear in the plan. One memory timeline is kept: the representative rank's
    (per-rank plans should attach memory changes to that rank's operations only).
    """
    memory = MemoryTimeline(capacity_bytes, plan.fragmentation, category_samples=[])
    memory.apply(plan.initial_memory.items(), START_OF_STEP, 0.0, (None, None))
    runner = _Runner(sim, plan, memory, slowdown, compute_scale, comm_slowdown)
    processes = [
        sim.env.process(runner.stream(name, [op for op in plan.ops if op.stream == name]))
        for name in plan.stream_names()
    ]
    if processes:
        sim.run(until=sim.env.all_of(processes))
    return PlanRun(
        float(sim.env.now) - runner.t0, sorted(runner.spans, key=lambda s: (s.start_s, s.end_s)), memory
    )
