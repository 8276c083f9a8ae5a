"""The composed step's engine paths and its cache: the event-free evaluator gives the discrete-event
step (to rounding) for every layout, schedule, recompute mode and strategy; a shared cache gives
the reports a fresh call gives; the path keyword is checked."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.parallel.cache import ComposeCache
from simcore.parallel.report import ParallelStepReport
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from simcore.workload.types import MoEDims
from tests.simcore.parallel.support import cluster, small_gpt

# Rounding only: the two engines order the same floating-point sums differently at most.
REL = 1e-9
COMPARED = ("step_time_s", "peak_memory_bytes", "compute_s", "exposed_comm_s", "comm_s", "tp_comm_s")


@st.composite
def _points(draw: st.DrawFn) -> tuple[int, ParallelLayout, ParallelOptions, TrainingConfig]:
    gpus = draw(st.sampled_from([8, 16, 32]))
    tp, pp, cp = (draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    assume(gpus % (tp * pp * cp) == 0)
    schedule = draw(st.sampled_from(["1f1b", "gpipe", "zb-h1"]))
    vpp = draw(st.sampled_from([1, 2])) if schedule == "1f1b" and pp > 1 else 1
    recompute = draw(st.sampled_from(["none", "selective", "full", "every-2"]))
    micro_batch = draw(st.sampled_from([1, 2]))
    micro = pp * draw(st.integers(1, 2)) if pp > 1 else draw(st.integers(1, 3))
    dp = gpus // (tp * pp * cp)
    layout = ParallelLayout(tp=tp, pp=pp, cp=cp, vpp=vpp)
    options = ParallelOptions(
        schedule=schedule,
        recompute=recompute,
        sequence_parallel=draw(st.booleans()),
        offload=draw(st.sampled_from(["none", "none", "optimizer", "params", "activations"])),
    )
    config = TrainingConfig(global_batch=dp * micro_batch * micro, micro_batch=micro_batch)
    return gpus, layout, options, config


def _assert_close(fast: ParallelStepReport, des: ParallelStepReport) -> None:
    for name in COMPARED:
        a, b = getattr(fast, name), getattr(des, name)
        assert math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), (name, a, b)
    assert fast.fits == des.fits
    assert fast.stage_peak_memory_bytes == pytest.approx(des.stage_peak_memory_bytes, rel=REL)


@settings(
    max_examples=int(__import__("os").environ.get("N", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(
    point=_points(),
    strategy=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"]),
    preset=st.sampled_from(["", "", "", "gpt2-small"]),
)
def test_fast_path_gives_the_discrete_event_step(
    point: tuple[int, ParallelLayout, ParallelOptions, TrainingConfig], strategy: str, preset: str
) -> None:
    gpus, layout, options, config = point
    workload, topology = (load_workload(preset) if preset else small_gpt()), cluster("dgx-a100", gpus)
    assume(layout.vpp == 1 or len(workload.block_names) % (layout.pp * layout.vpp) == 0)  # interleaving
    fast = compose_parallel_step(workload, config, topology, strategy, layout, options, path="fast").report
    des = compose_parallel_step(workload, config, topology, strategy, layout, options, path="des").report
    _assert_close(fast, des)
    lean = compose_parallel_step(
        workload, config, topology, strategy, layout, options, path="fast", trace=False
    )
    _assert_close(lean.report, des)
    assert lean.pipeline is None or options.schedule == "zb-h1" or not lean.pipeline.spans
    # event-free without a trace: no pipeline, no offload, and a transient of recompute only where
    # the peak is during the passes (parallel.step._with_transient)
    if layout.pp == 1 and options.offload == "none" and options.recompute in ("none", "full"):
        assert lean.run is None
    if layout.pp > 1 or options.offload != "none":
        assert lean.run is not None


@pytest.mark.parametrize(
    ("strategy", "layout"),
    [
        ("zero1", ParallelLayout(tp=2, pp=2, ep=4)),
        ("fsdp", ParallelLayout(ep=8)),
        ("zero3", ParallelLayout(pp=2, ep=2)),
    ],
)
def test_fast_path_gives_the_discrete_event_step_with_experts(strategy: str, layout: ParallelLayout) -> None:
    workload = small_gpt(moe=MoEDims(experts=8, top_k=2, expert_ffn=1024, shared_experts=1, dense_layers=1))
    topology, config = cluster("dgx-a100", 16), TrainingConfig(global_batch=32, micro_batch=1)
    options = ParallelOptions(expert_load=1.3)
    fast = compose_parallel_step(workload, config, topology, strategy, layout, options, path="fast").report
    des = compose_parallel_step(workload, config, topology, strategy, layout, options, path="des").report
    assert fast.ep_comm_s > 0
    _assert_close(fast, des)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "hsdp"])
def test_pure_data_parallel_delegate_takes_the_path(strategy: str) -> None:
    workload, topology = small_gpt(), cluster("dgx-a100", 16)
    config = TrainingConfig(global_batch=32, micro_batch=1)
    fast = simulate_parallel_step(workload, config, topology, strategy, ParallelLayout(), path="fast").report
    des = simulate_parallel_step(workload, config, topology, strategy, ParallelLayout(), path="des").report
    auto = simulate_parallel_step(workload, config, topology, strategy, ParallelLayout()).report
    _assert_close(fast, des)
    assert auto == fast  # a homogeneous cluster: auto takes the fast path
    lean = simulate_parallel_step(workload, config, topology, strategy, ParallelLayout(), trace=False)
    _assert_close(lean.report, des)
    with pytest.raises(TrainsimError, match=r"report only \(trace=False\): no trace to show"):
        _ = lean.step


def test_unknown_path_is_refused() -> None:
    with pytest.raises(TrainsimError, match="engine path 'quick' is not known; allowed: auto, fast, des"):
        simulate_parallel_step(
            small_gpt(), TrainingConfig(global_batch=8), cluster("dgx-a100", 8), "ddp", ParallelLayout(tp=2),
            path="quick",
        )  # fmt: skip


CACHED = [
    ("zero1", ParallelLayout(tp=2, pp=2, vpp=2), ParallelOptions(), 16),
    ("fsdp", ParallelLayout(tp=2, pp=2), ParallelOptions(schedule="zb-h1", recompute="selective"), 8),
    ("ddp", ParallelLayout(pp=4), ParallelOptions(schedule="gpipe", recompute="full"), 8),
    ("zero3", ParallelLayout(tp=2, cp=2), ParallelOptions(offload="optimizer"), 4),
    ("hsdp", ParallelLayout(), ParallelOptions(), 4),
]


def test_reports_through_a_shared_cache_equal_fresh_ones() -> None:
    workload, topology = small_gpt(), cluster("dgx-a100", 32)
    cache = ComposeCache()
    for _ in range(2):  # the second round is answered from the cache
        for strategy, layout, options, per_dp in CACHED:
            for batch in (1, 2):  # stage runs are shared between global batches
                dp = layout.dp(32)
                config = TrainingConfig(global_batch=dp * per_dp * batch, micro_batch=1)
                shared = simulate_parallel_step(
                    workload, config, topology, strategy, layout, options, cache=cache
                )
                fresh = simulate_parallel_step(workload, config, topology, strategy, layout, options)
                assert shared.report == fresh.report, (strategy, layout)
                assert [s.peak_memory_bytes for s in shared.stages] == [
                    s.peak_memory_bytes for s in fresh.stages
                ]
                assert shared.step.run.spans == fresh.step.run.spans
    assert cache.hits > cache.misses


def test_cache_keeps_what_it_keys_by_identity_alive() -> None:
    cache = ComposeCache(max_entries=2)
    token = object()
    key = cache.identity(token)
    assert cache.identity(token) == key and cache.identity(None) == 0
    builds: list[int] = []

    def build(k: int) -> int:
        builds.append(k)
        return k

    for k in (1, 2, 1, 3, 2):
        cache.get("t", k, lambda k=k: build(k))  # type: ignore[misc]
    # 1 and 2 built; 1 hit (now most recent); 3 evicts 2; 2 is built again
    assert builds == [1, 2, 3, 2] and cache.size("t") == 2 and cache.hits == 1


def test_every_input_the_cache_keys_on_changes_the_answer() -> None:
    """One cache asked for points that differ in one input each: every answer is a fresh call's
    (no point is answered with another's cached stage), and the inputs do change the step."""
    base: dict[str, object] = {
        "workload": small_gpt(),
        "config": TrainingConfig(global_batch=16, micro_batch=1),
        "topology": cluster("dgx-a100", 16),
        "strategy": "zero1",
        "layout": ParallelLayout(tp=2, pp=2),
        "options": ParallelOptions(),
    }
    variants: list[dict[str, object]] = [
        {},
        {"workload": small_gpt(layers=12)},
        {"workload": small_gpt(tied=False)},
        {"config": TrainingConfig(global_batch=16, micro_batch=2)},
        {"config": TrainingConfig(global_batch=16, micro_batch=1, dtype="fp32")},
        {"config": TrainingConfig(global_batch=16, micro_batch=1, optimizer="sgd")},
        {"topology": cluster("hgx-h100", 16)},
        {"topology": cluster("dgx-a100", 32), "config": TrainingConfig(global_batch=32, micro_batch=1)},
        {"strategy": "zero2"},
        {"layout": ParallelLayout(tp=4, pp=2)},
        {"layout": ParallelLayout(tp=2, pp=2, cp=2)},
        {"options": ParallelOptions(schedule="gpipe")},
        {"options": ParallelOptions(recompute="selective")},
        {"options": ParallelOptions(sequence_parallel=True)},
        {"options": ParallelOptions(offload="optimizer")},
    ]
    cache = ComposeCache()
    seen = []
    for variant in variants:
        point = {**base, **variant}
        args = [point[k] for k in ("workload", "config", "topology", "strategy", "layout", "options")]
        shared = simulate_parallel_step(*args, cache=cache).report  # type: ignore[arg-type]
        assert shared == simulate_parallel_step(*args).report, variant  # type: ignore[arg-type]
        seen.append((shared.step_time_s, shared.peak_memory_bytes))
    assert len(set(seen)) == len(seen)  # each input moves the step or its memory


def test_schedules_share_stage_runs_and_answer_as_fresh_calls_do() -> None:
    """1f1b, gpipe and zb-h1 layouts of one split run their stages once through a shared cache
    (the schedule orders passes; zb-h1's weight-gradient share is set apart), and each answers as a
    fresh call does, zb-h1 after the others and before them alike."""
    workload, topology = small_gpt(), cluster("dgx-a100", 16)
    layout = ParallelLayout(tp=2, pp=4)
    config = TrainingConfig(global_batch=2 * 8, micro_batch=1)
    for order in (("1f1b", "zb-h1", "gpipe"), ("zb-h1", "gpipe", "1f1b")):
        cache = ComposeCache()
        for schedule in order:
            options = ParallelOptions(schedule=schedule)
            shared = simulate_parallel_step(workload, config, topology, "zero1", layout, options, cache=cache)
            fresh = simulate_parallel_step(workload, config, topology, "zero1", layout, options)
            assert shared.report == fresh.report, schedule
        runs = cache.misses
        simulate_parallel_step(
            workload, config, topology, "zero1", layout, ParallelOptions(schedule="zb-h1"), cache=cache
        )
        assert cache.misses == runs  # nothing new to build or run


def test_strategies_that_time_alike_share_one_pipeline_run_and_answer_as_fresh_calls_do() -> None:
    """Without a trace a pipeline run is kept by its inputs: DDP and ZeRO-1 on one split
    communicate after the last micro-batch, so their stages time alike and one run serves both;
    each report equals a fresh call's, and a call with a trace (spans) runs its own."""
    workload, topology = small_gpt(), cluster("dgx-a100", 16)
    layout = ParallelLayout(tp=2, pp=4)
    config = TrainingConfig(global_batch=2 * 8, micro_batch=1)
    cache = ComposeCache()
    for strategy in ("ddp", "zero1"):
        shared = simulate_parallel_step(
            workload, config, topology, strategy, layout, cache=cache, path="fast", trace=False
        )
        fresh = simulate_parallel_step(workload, config, topology, strategy, layout, path="fast", trace=False)
        assert shared.report == fresh.report, strategy
    assert cache.size("pipeline run") == 1
    traced = simulate_parallel_step(workload, config, topology, "zero1", layout, cache=cache, path="fast")
    assert traced.report == fresh.report and cache.size("pipeline run") == 1
