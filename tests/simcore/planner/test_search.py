"""The planner end to end: the same ranking on every engine, frontiers, budgets and interruption."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time

import pytest

from simcore.errors import TrainsimError
from simcore.planner import executors
from simcore.planner.evaluate import PlanJob
from simcore.planner.executors import check_engine, chunk_tasks, run_sweep
from simcore.planner.rank import Budget
from simcore.planner.search import PlanResult, plan, prepare
from simcore.planner.space import Layout, SearchSpace
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from tests.paths import REPO
from topologies import load_cluster

GPUS = (8, 16, 32)


def _job() -> PlanJob:
    workload = load_workload("gpt2-small", seq_len=512)
    config = TrainingConfig(global_batch=256, seq_len=512)
    return PlanJob(workload, "dgx-a100", load_cluster, config, key="search-tests")


def _ranking(result: PlanResult) -> list[tuple[int, list[dict[str, object]]]]:
    return [(c.gpus, [r.to_record() for r in c.ranked]) for c in result.counts]


def test_the_pool_ranks_exactly_as_one_process() -> None:
    space = SearchSpace(max_micro_batch=8)
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
    assert all(c.why.startswith(c.ranked[0].layout.label()) for c in serial.counts)


def test_chunks_keep_one_gpu_count_each_and_cover_every_task() -> None:
    tasks = [(g, Layout(s, m)) for g in (8, 16) for s in ("ddp", "fsdp") for m in (1, 2, 4)]
    chunks = chunk_tasks(tasks, workers=2)
    assert sorted(i for chunk in chunks for i, _ in chunk) == list(range(len(tasks)))
    assert all(len({task[0] for _, task in chunk}) == 1 for chunk in chunks)


def test_memory_floor_skips_layouts_untimed() -> None:
    workload = load_workload("llama2-13b", seq_len=2048)
    job = PlanJob(
        workload, "g5.48xlarge", load_cluster, TrainingConfig(global_batch=64, seq_len=2048), key="13b"
    )
    prepared = prepare(job, (16,), SearchSpace(max_micro_batch=2), Budget())
    count = prepared.counts[16]
    assert count.pruned > 0 and count.considered == count.pruned + len(prepared.tasks)
    assert {layout.strategy for _, layout in prepared.tasks} <= {"fsdp", "zero3"}  # 24 GB A10Gs


def test_budgets_price_and_drop_layouts() -> None:
    budget = Budget(train_tokens=1e9, price_per_gpu_hour=2.0, max_hours=1e-3)
    result = plan(_job(), (8,), SearchSpace(max_micro_batch=4, strategies=("ddp", "fsdp")), budget, workers=1)
    count = result.counts[0]
    assert count.over_budget == count.evaluated and not count.ranked
    ok = plan(_job(), (8, 16), SearchSpace(max_micro_batch=4, strategies=("ddp",)), Budget(train_tokens=1e9,
              price_per_gpu_hour=2.0), workers=1)  # fmt: skip
    best = ok.counts[0].ranked[0]
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
        Budget(**kwargs)  # type: ignore[arg-type]


def test_an_empty_search_space_is_an_error() -> None:
    with pytest.raises(TrainsimError, match="the search space is empty: 24 GPUs: the global batch of 256"):
        prepare(_job(), (24,), SearchSpace(), Budget())


def test_interrupted_sweeps_keep_what_finished() -> None:
    job = _job()
    prepared = prepare(job, (8,), SearchSpace(max_micro_batch=4), Budget())
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
    space = SearchSpace(max_micro_batch=8)
    local = plan(_job(), GPUS, space, workers=2)
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        remote = plan(_job(), GPUS, space, engine="ray", workers=2)
    finally:
        ray.shutdown()
    assert remote.engine == "ray" and remote.configs_evaluated == local.configs_evaluated
    assert _ranking(remote) == _ranking(local)
