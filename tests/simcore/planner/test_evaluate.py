"""simcore.planner.evaluate: a planned layout is timed as the what-if times it."""

from __future__ import annotations

import pytest

from simcore.planner.evaluate import PlanJob, WorkerCaches, time_layout
from simcore.planner.space import PlanLayout
from simcore.strategies.base import TrainingConfig
from simcore.whatif.sweep import run_what_if
from simcore.workload.loader import load_workload
from topologies import load_cluster

GPUS = 16


@pytest.mark.parametrize("fp8", ["delayed", "none"])
def test_the_plan_times_a_data_parallel_layout_as_the_what_if_does(fp8: str) -> None:
    """Issue 22: Transformer Engine's delayed recipe casts its weights once per step; the planner's
    data-parallel path built its compute model without the step's micro-batches and cast every one."""
    workload = load_workload("gpt2-small", seq_len=512)
    config = TrainingConfig(global_batch=GPUS * 2 * 8, micro_batch=2, seq_len=512, dtype="fp8", fp8=fp8)
    assert config.accumulation_steps(GPUS) == 8
    job = PlanJob(workload, "hgx-h100", load_cluster, config, key=f"evaluate-tests-{fp8}")
    planned = time_layout(job, GPUS, PlanLayout("ddp", 2), WorkerCaches()).report
    direct = run_what_if(
        workload, ["hgx-h100"], [GPUS], loader=load_cluster, strategies=["ddp"], config=config
    ).reports[-1]
    assert planned is not None and direct.gpus == GPUS
    # the same numbers exactly: one compute model, one step plan, one evaluator
    assert planned.step_time_s == direct.step_time_s
    assert planned.compute_s == direct.compute_s
    assert planned.peak_memory_bytes == direct.peak_memory_bytes
