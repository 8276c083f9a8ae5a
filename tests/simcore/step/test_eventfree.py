"""The event-free evaluator runs a step plan exactly as the SimPy runner does."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.step.des import run_plan
from simcore.step.eventfree import evaluate_plan, evaluate_plan_timed
from simcore.step.plan import NO_KEY, Op, PlanBuilder, PlanRun, Span, StepPlan, new_span, phase_of, phase_text
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import TrainingConfig
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer

CAPACITY = 80e9


def _same(a: PlanRun, b: PlanRun) -> None:
    assert b.step_time_s == a.step_time_s
    assert b.spans == a.spans
    assert b.memory.samples == a.memory.samples
    assert b.memory.peak() == a.memory.peak()
    assert b.memory.category_max == a.memory.category_max


def _both(
    plan: StepPlan, slowdown: float | None, scale: float | dict[str, float] = 1.0, comm_slowdown: float = 1.0
) -> tuple[PlanRun, PlanRun]:
    settings = {"slowdown": slowdown, "compute_scale": scale, "comm_slowdown": comm_slowdown}
    des = run_plan(Simulation(0), plan, capacity_bytes=CAPACITY, **settings)  # type: ignore[arg-type]
    fast = evaluate_plan(plan, capacity_bytes=CAPACITY, **settings)  # type: ignore[arg-type]
    return des, fast


# Per-collective contention (slowdown None) with and without collectives slowed by compute.
SLOWDOWNS = st.sampled_from([(1.0, 1.0), (1.1, 1.0), (1.7, 1.0), (None, 1.0), (None, 1.3)])


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([1, 2, 8, 16]),
    accumulation=st.integers(1, 3),
    micro_batch=st.integers(1, 3),
    blocks=st.integers(1, 5),
    checkpoint=st.booleans(),
    prefetch=st.integers(0, 2),
    bucket_view=st.booleans(),
    wrap=st.sampled_from(["per-block", "every-2-layers", "every-2-blocks"]),
    slowdowns=SLOWDOWNS,
)
def test_strategy_plans_match_the_simpy_run_exactly(
    name: str,
    gpus: int,
    accumulation: int,
    micro_batch: int,
    blocks: int,
    checkpoint: bool,
    prefetch: int,
    bucket_view: bool,
    wrap: str,
    slowdowns: tuple[float | None, float],
) -> None:
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        activation_checkpointing=checkpoint,
        prefetch=prefetch,
        gradient_as_bucket_view=bucket_view,
        wrap=wrap,
        bucket_size_bytes=8 * 2**20,
    )
    ctx = toy_context(gpus, config, workload=toy_transformer(blocks=blocks))
    slowdown, comm_slowdown = slowdowns
    _same(*_both(get_strategy(name).build_plan(ctx), slowdown, comm_slowdown=comm_slowdown))


@st.composite
def random_plans(draw: st.DrawFn) -> StepPlan:
    """Plans of several processes' streams; every dependency points at an earlier operation."""
    streams = draw(st.lists(st.sampled_from(["compute", "comm", "r1/compute", "r1/comm", "r1/copy"]),
                            min_size=1, max_size=30))  # fmt: skip
    builder = PlanBuilder("random")
    builder.plan.initial_memory = {"params": 10.0}
    categories = ["activations", "buffers", "temp"]
    for index, stream in enumerate(streams):
        earlier = st.lists(st.integers(0, index - 1), max_size=2, unique=True) if index else st.just([])
        duration = draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.25]))
        change = draw(st.sampled_from(categories)), float(draw(st.integers(-3, 5)))
        contention = draw(st.sampled_from([1.0, 1.1, 1.5])) if stream.endswith("comm") else 1.0
        builder.add(
            stream,
            f"op{index}",
            duration,
            after=tuple(draw(earlier)),
            after_start=tuple(draw(earlier)),
            on_start=(change,) if draw(st.booleans()) else (),
            on_end=(change,) if draw(st.booleans()) else (),
            after_end=((change[0], -change[1]),) if draw(st.booleans()) else (),
            contention=contention,
        )
    return builder.plan


@settings(max_examples=300, deadline=None)
@given(
    plan=random_plans(),
    slowdowns=st.sampled_from([(1.0, 1.0), (1.25, 1.0), (2.0, 1.0), (None, 1.0), (None, 1.25), (None, 2.0)]),
    scale=st.sampled_from([1.0, 0.5, {"r1": 3.0}]),
)
def test_random_plans_match_the_simpy_run_exactly(
    plan: StepPlan, slowdowns: tuple[float | None, float], scale: float | dict[str, float]
) -> None:
    slowdown, comm_slowdown = slowdowns
    _same(*_both(plan, slowdown, scale, comm_slowdown))


def test_an_empty_plan_takes_no_time() -> None:
    run = evaluate_plan(StepPlan("none", initial_memory={"params": 4.0}), capacity_bytes=8.0)
    assert run.step_time_s == 0.0
    assert run.memory.peak().peak_bytes == 4.0


def test_compute_slowed_while_communication_runs() -> None:
    """2 s of compute with a 1 s collective over its first second at slowdown 2: 1 s does half a
    second of work, the remaining 1.5 s run at full speed: 2.5 s in all."""
    builder = PlanBuilder("overlap")
    first = builder.compute("forward", 2.0)
    builder.comm("all_reduce", 1.0, kind="all_reduce", size_bytes=1.0, after_start=[first])
    run = evaluate_plan(builder.plan, capacity_bytes=1.0, slowdown=2.0)
    assert run.step_time_s == pytest.approx(2.5)


def test_each_collective_slows_compute_by_its_own_factor_and_compute_slows_it() -> None:
    """Per collective: 2 s of compute beside a 1 s collective of contention 2 with comm_slowdown
    1.5 from their common start. Both slowed: after 1.5 s the collective is done (1 s of its work
    at 2/3) and the compute has done 0.75 s of work; the remaining 1.25 s run at full speed: 2.75 s."""
    builder = PlanBuilder("overlap")
    first = builder.compute("forward", 2.0)
    builder.comm("all_reduce", 1.0, kind="all_reduce", size_bytes=1.0, after_start=[first], contention=2.0)
    run = evaluate_plan(builder.plan, capacity_bytes=1.0, slowdown=None, comm_slowdown=1.5)
    assert run.step_time_s == pytest.approx(2.75)
    assert [span.end_s for span in run.spans] == pytest.approx([1.5, 2.75])


def test_a_plan_that_waits_on_itself_is_refused() -> None:
    builder = PlanBuilder("deadlock")
    builder.add("compute", "a", 1.0, after=(1,))
    builder.add("comm", "b", 1.0, after=(0,))
    with pytest.raises(TrainsimError, match="deadlocks"):
        evaluate_plan(builder.plan, capacity_bytes=1.0)


@pytest.mark.parametrize("name", strategy_names())
def test_memory_phases_are_kept_as_operations_that_render_their_text(name: str) -> None:
    """Both runners keep, beside each phase's text, the operations it was made of (the compute
    running, the collective that changed memory): rendered, they give the text back."""
    config = TrainingConfig(global_batch=16 * 3, micro_batch=1, gradient_sync_every_micro_batch=False)
    plan = get_strategy(name).build_plan(toy_context(16, config, workload=toy_transformer(blocks=3)))
    des = run_plan(Simulation(0), plan, capacity_bytes=CAPACITY, slowdown=None, comm_slowdown=1.2)
    timed = evaluate_plan_timed(
        plan, capacity_bytes=CAPACITY, slowdown=None, comm_slowdown=1.2, phase_peaks=True
    )
    for memory in (des.memory, timed.run.memory):
        assert phase_text(phase_of(memory.peak_key)) == memory.peak().phase  # type: ignore[arg-type]
    peaks = timed.run.memory.phase_peaks or {}
    with_collective = [key for *_, key in peaks.values() if key[1] is not None]  # type: ignore[index]
    if get_strategy(name).zero_stage >= 2:  # their collectives free or gather memory
        assert with_collective, "some memory should change in a collective"
    assert all(phase_text(phase_of(key)) == phase for phase, (*_, key) in peaks.items())  # type: ignore[arg-type]


def test_the_builders_operations_and_spans_are_the_frozen_objects_their_classes_make() -> None:
    builder = PlanBuilder("test")
    key = builder.key(micro_batch=2)
    builder.compute(
        builder.label("forward of block0"), 1.5, key=key, kind="fwd", on_end=[("activations", 8.0)]
    )
    builder.comm("all_reduce", 0.25, kind="all_reduce", size_bytes=64, after=[0], link="l", contention=1.2)
    label = builder.label("forward of block0")
    assert builder.plan.ops == [
        Op(0, "compute", "forward of block0 [micro-batch 2]", 1.5, "fwd", on_end=(("activations", 8.0),),
           key=key, label=label),
        Op(1, "comm", "all_reduce", 0.25, "all_reduce", after=(0,), bytes=64.0, link="l", contention=1.2,
           key=NO_KEY),
    ]  # fmt: skip
    span = new_span("comm", "x", "all_reduce", 0.0, 1.0, 8.0, "nvlink")
    assert span == Span("comm", "x", "all_reduce", 0.0, 1.0, 8.0, "nvlink")
    with pytest.raises(FrozenInstanceError):
        builder.plan.ops[0].duration_s = 2.0  # type: ignore[misc]
