"""An FSDP stage under pipelining that gathers and reduces once per step (torch.distributed.pipelining
with ``reshard_after_forward`` off and the gradient sync on the last micro-batch): its all-gather and
reduce-scatter belong to the step once, not to every micro-batch's passes."""

from __future__ import annotations

import pytest

from simcore.parallel import ParallelLayout
from simcore.parallel.step import _gathers_once, compose_parallel_step
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt

ONCE = {"reshard_after_forward": False, "gradient_sync_every_micro_batch": False}


@pytest.mark.parametrize(
    ("framework", "reshard", "sync_every", "once"),
    [
        ("torch-fsdp", False, False, True),
        ("torch-fsdp", True, False, False),  # gathered again every forward
        ("torch-fsdp", False, True, False),  # reduced every micro-batch
        ("deepspeed", False, False, False),  # ZeRO-3 reshards every module
    ],
)
def test_which_stages_gather_once(framework: str, reshard: bool, sync_every: bool, once: bool) -> None:
    config = TrainingConfig(
        global_batch=8,
        micro_batch=1,
        reshard_after_forward=reshard,
        gradient_sync_every_micro_batch=sync_every,
    )
    assert _gathers_once(framework, config) is once


def _step(strategy: str, micro_batches: int, **flags: bool):  # type: ignore[no-untyped-def]
    config = TrainingConfig(global_batch=4 * 2 * micro_batches, micro_batch=2, **flags)
    return compose_parallel_step(small_gpt(), config, cluster("hgx-h100", 8), strategy, ParallelLayout(pp=2))


def _forward_passes(result) -> list[float]:  # type: ignore[no-untyped-def]
    return [end - start for rank, op, start, end in result.pipeline.spans if op.kind == "F"]


def test_once_per_step_passes_are_the_pure_compute_and_the_stretch_is_paid_once() -> None:
    ddp, once, every = _step("ddp", 4), _step("fsdp", 4, **ONCE), _step("fsdp", 4)
    # DDP's passes are the stage's compute alone; the gather-once FSDP stage's are the same
    assert _forward_passes(once) == pytest.approx(_forward_passes(ddp), rel=1e-12)
    # every micro-batch gathering again stretches each pass
    assert min(_forward_passes(every)) > max(_forward_passes(once))
    # the once-per-step cost does not grow with the micro-batches: the same gap to DDP at 4 and 8
    gap4 = once.report.step_time_s - ddp.report.step_time_s
    gap8 = _step("fsdp", 8, **ONCE).report.step_time_s - _step("ddp", 8).report.step_time_s
    assert gap4 > 0 and gap8 == pytest.approx(gap4, rel=1e-9)
