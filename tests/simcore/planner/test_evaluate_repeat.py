"""A sweep's outcomes with micro-batches repeated (:meth:`simcore.step.plan.PlanBuilder.repeat`)
are the outcomes of plans built micro-batch by micro-batch, bit for bit, on both engine paths."""

from __future__ import annotations

import pytest

from simcore.parallel.options import ParallelOptions
from simcore.planner.evaluate import PlanJob, WorkerCaches, evaluate_tasks
from simcore.planner.space import PlanLayout
from simcore.step.plan import PlanBuilder
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from topologies import load_cluster

# GPT-2 medium's 24 blocks fold (simcore.fastpath.fold.MIN_RUN); 8 sequences per GPU make
# accumulations of 8 and 4: a probe of long accumulation, and a whole step of four.
_LAYOUTS = [
    PlanLayout(strategy, micro_batch, options=ParallelOptions(recompute=recompute))
    for strategy in ("fsdp", "zero3", "hsdp", "zero2")
    for micro_batch in (1, 2)
    for recompute in ("none", "full")
]


@pytest.mark.parametrize("path", ["fast", "des"])
def test_repeated_micro_batches_give_the_outcomes_of_plans_built_one_by_one(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = load_workload("gpt2-medium", seq_len=256)
    # (the discrete-event path runs whole plans: one accumulation of four, no recompute, is enough)
    layouts = (
        _LAYOUTS if path == "fast" else [o for o in _LAYOUTS if o.micro_batch == 2 and o.recompute == "none"]
    )
    gpus = 16
    config = TrainingConfig(global_batch=gpus * 8, seq_len=256)
    job = PlanJob(workload, "dgx-a100", load_cluster, config, engine_path=path, key=f"repeat-{path}")
    tasks = [(gpus, layout) for layout in layouts]
    warm = WorkerCaches()  # the cluster loaded and priced once; each pass has step caches of its own
    evaluate_tasks(job, tasks[:1], warm)
    outcomes = []
    for repeat in (True, False):
        with monkeypatch.context() as patch:
            if not repeat:
                patch.setattr(PlanBuilder, "repeat", lambda self, span, previous: None)
            caches = WorkerCaches(warm.clusters, warm.topologies, workloads=warm.workloads)
            outcomes.append(evaluate_tasks(job, tasks, caches))
    assert all(outcome.report is not None for outcome in outcomes[0])
    assert [repr(o) for o in outcomes[0]] == [repr(o) for o in outcomes[1]]
