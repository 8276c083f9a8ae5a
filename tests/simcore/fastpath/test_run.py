"""The step seam: one entry picks the event-free report or the simulated steps, and gives what
each caller needs; the planner's workers time through it with caches they own."""

from __future__ import annotations

import pytest

from simcore.errors import TrainsimError
from simcore.fastpath.run import evaluate_step
from simcore.fastpath.step import fast_step_report
from simcore.planner import evaluate
from simcore.planner.evaluate import PlanJob, WorkerCaches, evaluate_tasks
from simcore.planner.space import PlanLayout
from simcore.strategies import get_strategy
from simcore.strategies.base import StepContext, TrainingConfig
from simcore.strategies.runner import report_step, simulate_step
from simcore.workload.loader import load_workload
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer
from topologies import load_cluster

LABELS = {"cluster": "c", "device": "d", "peak_flops": 1e14}


def _ctx() -> StepContext:
    config = TrainingConfig(global_batch=4 * 2 * 6, micro_batch=2)
    return toy_context(4, config, workload=toy_transformer(blocks=6))


def test_the_fast_path_without_a_trace_gives_the_event_free_report_and_no_steps() -> None:
    strategy, ctx = get_strategy("fsdp"), _ctx()
    got = evaluate_step(strategy, ctx, path="fast", slowdown=None, **LABELS)  # type: ignore[arg-type]
    assert got.step is None
    assert got.report == fast_step_report(strategy, ctx, slowdown=None, **LABELS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "trace", "scaled"), [("fast", True, False), ("des", False, False), ("fast", False, True)]
)
def test_a_trace_the_discrete_event_path_or_a_compute_scale_simulate_the_steps(
    path: str, trace: bool, scaled: bool
) -> None:
    strategy, ctx = get_strategy("zero3"), _ctx()
    scale = (lambda sim, step: 1.25) if scaled else None
    got = evaluate_step(
        strategy,
        ctx,
        path=path,
        slowdown=1.1,
        compute_scale=scale,
        seed=3,
        trace=trace,
        **LABELS,  # type: ignore[arg-type]
    )
    want = simulate_step(strategy, ctx, seed=3, slowdown=1.1, compute_scale=scale, path=path)
    assert got.step is not None and got.step.step_times_s == want.step_times_s
    assert got.report == report_step(want, ctx, **LABELS)  # type: ignore[arg-type]


def test_an_unresolved_engine_path_is_refused_in_one_line() -> None:
    with pytest.raises(TrainsimError, match="not resolved"):
        evaluate_step(get_strategy("ddp"), _ctx(), path="auto", slowdown=1.0, **LABELS)  # type: ignore[arg-type]


def test_a_planner_worker_fills_the_caches_it_is_given_and_times_alike_with_fresh_ones() -> None:
    workload = load_workload("gpt2-small", seq_len=256)
    job = PlanJob(workload, "dgx-a100", load_cluster, TrainingConfig(global_batch=64, seq_len=256), key="t")
    tasks = [(8, PlanLayout("fsdp", 2)), (8, PlanLayout("ddp", 4))]
    mine = WorkerCaches()
    first = evaluate_tasks(job, tasks, mine)
    assert len(mine.clusters) == 1 and len(mine.contexts) == 2
    assert [o.report for o in evaluate_tasks(job, tasks, WorkerCaches())] == [o.report for o in first]
    process = evaluate.worker_caches()
    assert process is not mine and evaluate.worker_caches() is process  # the process's own, made once


def test_several_or_jittered_steps_are_simulated_on_the_fast_path_too() -> None:
    strategy = get_strategy("fsdp")
    config = TrainingConfig(global_batch=4 * 2 * 6, micro_batch=2, steps=3, compute_jitter_sigma=0.1)
    ctx = toy_context(4, config, workload=toy_transformer(blocks=6))
    got = evaluate_step(strategy, ctx, path="fast", slowdown=None, seed=7, **LABELS)  # type: ignore[arg-type]
    want = simulate_step(strategy, ctx, seed=7, slowdown=None, path="fast")
    assert got.step is not None and got.step.step_times_s == want.step_times_s
    assert len(set(want.step_times_s)) > 1  # the jitter drew a different factor per step
    with pytest.raises(TrainsimError, match="one deterministic step"):
        fast_step_report(strategy, ctx, slowdown=None, **LABELS)  # type: ignore[arg-type]
