"""The planner end to end: the same ranking on every engine, frontiers, budgets and interruption."""

from __future__ import annotations

import functools
import logging
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from simcore.errors import TrainsimError
from simcore.parallel.layout import ParallelLayout
from simcore.parallel.report import ParallelStepReport
from simcore.planner import executors
from simcore.planner.evaluate import PlanJob, evaluate_tasks
from simcore.planner.executors import check_engine, chunk_tasks, run_sweep
from simcore.planner.rank import Budget, Ranked, deciding_factor, explain_winner, step_components
from simcore.planner.search import PlanResult, plan, prepare
from simcore.planner.space import PlanLayout, SearchSpace
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from tests.paths import REPO
from topologies import load_cluster

GPUS = (8, 16, 32)
# The data-parallel planner's space (fast path only), and a small 3-D one (composed parallel step).
DP = SearchSpace(max_micro_batch=8, max_tp=1, max_pp=1, recompute=("none", "full"))
THREE_D = SearchSpace(strategies=("ddp", "zero1", "fsdp"), micro_batches=(2,), recompute=("none",),
                      tp=(1, 2), pp=(1, 2), vpp=(1,), schedules=("1f1b",))  # fmt: skip


def _job() -> PlanJob:
    workload = load_workload("gpt2-small", seq_len=512)
    config = TrainingConfig(global_batch=256, seq_len=512)
    return PlanJob(workload, "dgx-a100", load_cluster, config, key="search-tests")


def _ranking(result: PlanResult) -> list[tuple[int, list[dict[str, object]]]]:
    return [(c.gpus, [r.to_record() for r in c.ranked]) for c in result.counts]


def test_the_pool_ranks_exactly_as_one_process() -> None:
    space = DP
    serial = plan(_job(), GPUS, space, workers=1)
    pooled = plan(_job(), GPUS, space, workers=2)
    assert pooled.workers == 2 and serial.workers == 1
    assert (
        serial.configs_evaluated
        == pooled.configs_evaluated
        == len(prepare(_job(), GPUS, space, Budget()).tasks)
    )
    assert _ranking(serial) == _ranking(pooled)
    best = [c.ranked[0] for c in serial.counts]
    assert [r.gpus for r in serial.gpu_frontier] == [r.gpus for r in best]  # throughput grows with GPUs here
    assert all(c.why.startswith(c.ranked[0].label) for c in serial.counts)


def test_a_three_dimensional_space_is_timed_on_the_composed_step() -> None:
    serial = plan(_job(), (8, 16), THREE_D, workers=1)
    pooled = plan(_job(), (8, 16), THREE_D, workers=2)
    assert _ranking(serial) == _ranking(pooled)
    for count in serial.counts:
        labels = {r.label for r in count.ranked}
        # (tp, pp) in (1,1), (2,1): three strategies; (1,2), (2,2): ddp and zero1 (pipelines)
        assert count.evaluated == 3 + 3 + 2 + 2 == len(labels)
        dp = count.gpus // 2
        assert f"zero1 dp{dp // 2} tp2 pp2 mb=2 sp" in labels and "fsdp mb=2" in labels
        for r in count.ranked:
            assert isinstance(r.report, ParallelStepReport) == (not r.layout.pure_data_parallel)
            assert r.to_record()["layout"]["label"] == r.label  # type: ignore[index]


def test_chunks_run_a_gpu_count_in_a_row_and_cover_every_task() -> None:
    tasks = [(g, PlanLayout(s, m)) for g in (16, 8) for s in ("ddp", "fsdp") for m in (1, 2, 4)]
    chunks = chunk_tasks(tasks, workers=2)
    assert sorted(i for chunk in chunks for i, _ in chunk) == list(range(len(tasks)))
    # the GPU count changes only once all its shapes are done (what a worker caches is per count),
    # and within a count the shapes follow in order, the strategies of a shape one after another
    order = [(task[0], task[1].micro_batch) for chunk in chunks for _, task in chunk]
    assert order == sorted(order)
    assert [g for g, _ in order] == [8] * 6 + [16] * 6


def test_the_local_pool_gives_each_worker_a_run_of_consecutive_chunks() -> None:
    """Each worker gets consecutive chunks with about as many tasks (so a GPU count is cached by one
    worker, two where a run ends inside it), every chunk once, no worker without any."""
    tasks = [
        (g, PlanLayout(s, m)) for g in (8, 16, 32) for s in ("ddp", "fsdp", "zero1") for m in (1, 2, 4, 8)
    ]
    work = [(0, None, chunk) for chunk in chunk_tasks(tasks, workers=2)]
    runs = executors._runs(work, 2)  # type: ignore[arg-type]
    assert [item for run in runs for item in run] == work
    sizes = [sum(len(c) for _, _, c in run) for run in runs]  # chunks of 5: within one chunk of even
    assert len(sizes) == 2 and sum(sizes) == 36 and abs(sizes[0] - sizes[1]) <= 5
    assert [len(run) for run in executors._runs(work[:1], 4)] == [1]  # type: ignore[arg-type]


def test_memory_floor_skips_layouts_untimed() -> None:
    workload = load_workload("llama2-13b", seq_len=2048)
    job = PlanJob(
        workload, "g5.48xlarge", load_cluster, TrainingConfig(global_batch=64, seq_len=2048), key="13b"
    )
    space = SearchSpace(max_micro_batch=2, max_tp=1, max_pp=1, offload=("none",))
    prepared = prepare(job, (16,), space, Budget())
    count = prepared.counts[16]
    assert count.pruned > 0 and count.considered == count.pruned + len(prepared.tasks)
    assert {layout.strategy for _, layout in prepared.tasks} <= {"fsdp", "zero3"}  # 24 GB A10Gs


def test_offload_is_tried_only_where_nothing_fits_without() -> None:
    workload = load_workload("llama2-13b", seq_len=2048)
    # DDP's gradients as bucket views and a fused optimizer: no bucket copies, no optimizer scratch
    # stay on the device when every state is offloaded
    config = TrainingConfig(
        global_batch=64, seq_len=2048, gradient_as_bucket_view=True, optimizer_impl="fused"
    )
    job = PlanJob(workload, "g5.48xlarge", load_cluster, config, key="13b-views")
    space = SearchSpace(
        strategies=("ddp", "fsdp"), micro_batches=(1,), max_tp=1, max_pp=1, recompute=("full",)
    )
    prepared = prepare(job, (16,), space, Budget())
    chosen = {layout.label(16) for _, layout in prepared.tasks}
    # fsdp's floor fits without offload (13B x 16 B / 16 = 13 GB < 24 GB); ddp's does not, and
    # offloading the optimizer state still leaves 13B x 8 B = 104 GB; offloading every state fits
    assert chosen == {"fsdp mb=1 recompute=full", "ddp mb=1 recompute=full offload=params"}
    # torch's defaults: DDP's bucket copies and foreach scratch (13B x 8 B) stay: nothing of ddp fits
    defaults = replace(job, config=TrainingConfig(global_batch=64, seq_len=2048), key="13b")
    assert {layout.label(16) for _, layout in prepare(defaults, (16,), space, Budget()).tasks} == {
        "fsdp mb=1 recompute=full"
    }
    none = prepare(job, (16,), replace(space, offload=("none",)), Budget())
    assert {layout.label(16) for _, layout in none.tasks} == {"fsdp mb=1 recompute=full"}
    assert none.counts[16].pruned == 1


def test_no_layout_fits_is_an_error_naming_the_floor() -> None:
    workload = load_workload("llama2-70b", seq_len=2048)
    job = PlanJob(
        workload, "g5.12xlarge", load_cluster, TrainingConfig(global_batch=16, seq_len=2048), key="70b"
    )
    with pytest.raises(
        TrainsimError, match=r"the search space is empty: 4 GPUs: no layout fits \(smallest memory floor"
    ):
        prepare(job, (4,), SearchSpace(offload=("none",), micro_batches=(1,)), Budget())


def test_budgets_price_and_drop_layouts() -> None:
    budget = Budget(train_tokens=1e9, price_per_gpu_hour=2.0, max_hours=1e-3)
    result = plan(_job(), (8,), replace(DP, max_micro_batch=4, strategies=("ddp", "fsdp")), budget, workers=1)
    count = result.counts[0]
    assert count.over_budget == count.evaluated and not count.ranked
    ok = plan(_job(), (8, 16), replace(DP, max_micro_batch=4, strategies=("ddp",)), Budget(train_tokens=1e9,
              price_per_gpu_hour=2.0), workers=1)  # fmt: skip
    best = ok.counts[0].ranked[0]
    assert best.hours is not None and best.report.tokens_per_s is not None
    assert best.hours == pytest.approx(1e9 / best.report.tokens_per_s / 3600)
    assert best.cost == pytest.approx(best.hours * 8 * 2.0)
    assert ok.cost_frontier


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_cost": 10.0, "train_tokens": 1e9}, "--max-cost needs --price-per-gpu-hour"),
        ({"max_hours": 10.0}, "need the length of the run"),
        ({"train_tokens": 1.0, "train_samples": 1.0}, "not both"),
        ({"headroom_fraction": 1.5}, "--memory-headroom"),
    ],
)
def test_contradictory_budgets(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        Budget(**kwargs)


def test_an_empty_search_space_is_an_error() -> None:
    with pytest.raises(TrainsimError, match="the search space is empty: 24 GPUs: the global batch of 256"):
        prepare(_job(), (24,), DP, Budget())


def test_interrupted_sweeps_keep_what_finished() -> None:
    job = _job()
    prepared = prepare(job, (8,), replace(DP, max_micro_batch=4), Budget())
    seen = []

    def stop_after_three(done: int) -> None:
        seen.append(done)
        if len(seen) == 3:
            raise KeyboardInterrupt

    sweep = run_sweep(job, prepared.tasks, workers=1, progress=stop_after_three)
    assert sweep.interrupted
    assert sum(outcome is not None for outcome in sweep.outcomes) == 3


def test_engines_are_checked_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TrainsimError, match="engine 'dask' is not known; allowed: local, ray"):
        check_engine("dask")
    with pytest.raises(TrainsimError, match="needs --engine ray"):
        check_engine("local", "10.0.0.1:6379")
    monkeypatch.setattr(executors.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TrainsimError, match=r"pip install 'trainsim\[sweep\]'"):
        check_engine("ray")


def test_unreachable_ray_address_fails_fast() -> None:
    with pytest.raises(TrainsimError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:9"):
        executors._check_reachable("127.0.0.1:9")
    with pytest.raises(TrainsimError, match="is not host:port"):
        executors._check_reachable("nowhere")


@pytest.mark.slow
def test_an_address_that_is_not_ray_gives_up_within_the_bound() -> None:
    """Something listens but never speaks Ray: one error line and exit 2 after the bound, not a hang."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'trainsim[sweep]')")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    threading.Thread(target=lambda: [server.accept() for _ in range(8)], daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    command = [sys.executable, "-m", "experiments.plan", "--model", "gpt2-small", "--gpus", "8",
               "--global-batch", "8", "--engine", "ray", "--address", address, "--quiet"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: no Ray cluster answered at {address} within")
    assert done.stderr.count("\n") == 1
    assert time.perf_counter() - start < executors.RAY_INIT_TIMEOUT_S + 120
    server.close()


@pytest.mark.slow
def test_ray_ranks_exactly_as_the_local_pool() -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'trainsim[sweep]')")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        for space in (DP, THREE_D):
            local = plan(_job(), GPUS, space, workers=2)
            remote = plan(_job(), GPUS, space, engine="ray", workers=2)
            assert remote.engine == "ray" and remote.configs_evaluated == local.configs_evaluated
            assert _ranking(remote) == _ranking(local)
    finally:
        ray.shutdown()


@functools.cache
def _base_report() -> ParallelStepReport:
    (outcome,) = evaluate_tasks(_job(), [(16, PlanLayout("ddp", 1))])
    assert outcome.report is not None
    rep = outcome.report
    fields = {name: getattr(rep, name) for name in type(rep).__dataclass_fields__}
    return ParallelStepReport(**fields)


def _ranked(label_layout: PlanLayout, gpus: int, **fields: float) -> Ranked:
    """A ranked layout with a parallel report whose step is made of the given parts (samples/s)."""
    report = replace(_base_report(), tokens_per_s=None, exposed_comm_s=-1.0, **fields)  # type: ignore[arg-type]
    return Ranked(gpus, label_layout, report)


def test_the_why_names_the_deciding_factor() -> None:
    piped = PlanLayout("zero1", 1, ParallelLayout(tp=2, pp=2))
    flat = PlanLayout("zero1", 1, ParallelLayout(tp=4))
    dp = PlanLayout("fsdp", 1)
    # step 1.0 s: compute 0.7, bubble 0.1 (10 %), exposed communication 0.2
    best = _ranked(piped, 16, step_time_s=1.0, compute_s=0.7, pipeline_bubble_fraction=0.1, samples_per_s=16.0,
                   peak_memory_bytes=2**30)  # fmt: skip
    assert step_components(best.report) == pytest.approx(
        {"compute": 0.7, "pipeline bubble": 0.1, "exposed communication": 0.2}
    )
    # runner-up: more compute (0.9 vs 0.7), the same communication: compute decides
    runner = _ranked(flat, 16, step_time_s=1.1, compute_s=0.9, samples_per_s=14.0)
    assert deciding_factor(best, runner) == "compute 0.700 s vs 0.900 s per step"
    # pure data parallelism: 0.6 s more exposed communication
    plain = _ranked(dp, 16, step_time_s=1.5, compute_s=0.7, samples_per_s=10.0)
    assert deciding_factor(best, plain) == "exposed communication 0.200 s vs 0.800 s per step"
    # against a deeper pipeline, the bubble decides
    deep = _ranked(
        piped, 16, step_time_s=1.3, compute_s=0.7, pipeline_bubble_fraction=0.4, samples_per_s=12.0
    )
    assert deciding_factor(best, deep) == "pipeline bubble 0.100 s vs 0.520 s per step"
    why = explain_winner([best, runner, plain], ["ddp"], 80 * 2**30, plain)
    assert why.startswith("zero1 dp4 tp2 pp2 mb=1 is the fastest of 3 layout(s) that fit")
    assert "1.14x the samples/s of the runner-up zero1 dp4 tp4 mb=1 (deciding: compute" in why
    assert (
        "1.60x the samples/s of the best pure data-parallel layout fsdp mb=1 (deciding: exposed communication"
        in why
    )
    assert why.endswith("peak 1.0 of 80.0 GiB; ddp never fit here")
    alone = explain_winner([best, runner], [], 80 * 2**30, None)
    assert "memory: no pure data-parallel layout fits" in alone
    assert "best pure data-parallel" not in explain_winner([plain, best], [], 80 * 2**30, plain)
    second = explain_winner([best, plain], [], 80 * 2**30, plain)
    assert "of the runner-up (the best pure data-parallel layout) fsdp mb=1 (deciding" in second
    assert second.count("fsdp mb=1") == 1


# Enough candidates that some are slower by bound than the listed ones.
WIDE = SearchSpace(strategies=("ddp", "zero1", "fsdp"), micro_batches=(1, 2), recompute=("none", "full"),
                   tp=(1, 2), pp=(1, 2, 4), vpp=(1,), schedules=("1f1b", "zb-h1"))  # fmt: skip


def test_skipping_by_bound_lists_what_the_exhaustive_search_lists() -> None:
    """The first ``keep`` layouts of every count, their order and records, and the explanation's
    runner-up are those of the exhaustive search; skipped candidates are not timed, and counted."""
    full = plan(_job(), (8, 16), WIDE, workers=1)
    keep = 3
    bounded = plan(_job(), (8, 16), WIDE, workers=1, keep=keep)
    assert sum(c.bound_skipped for c in bounded.counts) > 0
    for a, b in zip(full.counts, bounded.counts, strict=True):
        assert [r.to_record() for r in a.ranked[:keep]] == [r.to_record() for r in b.ranked[:keep]]
        assert b.evaluated + b.bound_skipped == a.evaluated and a.bound_skipped == 0
        assert b.never_fit == a.never_fit
    assert [r.to_record() for r in bounded.gpu_frontier] == [r.to_record() for r in full.gpu_frontier]
    assert bounded.configs_evaluated == full.configs_evaluated - sum(c.bound_skipped for c in bounded.counts)


def test_skipping_by_bound_is_the_same_on_every_worker_count() -> None:
    one = plan(_job(), (8,), WIDE, workers=1, keep=2)
    two = plan(_job(), (8,), WIDE, workers=2, keep=2)
    assert _ranking(one) == _ranking(two)
    assert [c.bound_skipped for c in one.counts] == [c.bound_skipped for c in two.counts]
