"""The strategies' memory copies: DDP bucket copy-in/out, FSDP2 all-gather copy-out and
reduce-scatter copy-in, ZeRO bucket copy-in; each 2 x bytes / memory bandwidth, on the compute
stream except FSDP2's reduce-scatter copy-in, which runs on its reduce-scatter stream on GPUs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.step.plan import COMPUTE
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import simulate_step
from tests.simcore.strategies.test_strategies_support import RateTimer, toy_context

CONFIG = TrainingConfig(global_batch=16, micro_batch=2, dtype="bf16", precision="mixed")


def _plan(name: str, gpus: int, config: TrainingConfig = CONFIG, bandwidth: float | None = 1.5e12):
    ctx = toy_context(gpus, config)
    ctx.timer = RateTimer(memory_bandwidth_Bps=bandwidth)
    return get_strategy(name).build_plan(ctx), ctx


def _copies(plan) -> list:
    return [op for op in plan.ops if op.kind == "copy"]


def test_ddp_copies_every_gradient_byte_in_and_out() -> None:
    plan, ctx = _plan("ddp", 4)
    copies = _copies(plan)
    grads = ctx.workload.params * CONFIG.grad_bytes
    ins = [op for op in copies if "into bucket" in op.name]
    outs = [op for op in copies if "out to gradients" in op.name]
    assert len(ins) == len({op.name for op in plan.ops if op.kind == "all_reduce"}) and len(outs) == 1
    assert math.fsum(op.duration_s for op in ins) == pytest.approx(2 * grads / 1.5e12)
    assert outs[0].duration_s == pytest.approx(2 * grads / 1.5e12)
    assert all(op.stream == COMPUTE for op in copies)


def test_ddp_bucket_views_copy_nothing_and_one_gpu_still_runs_the_reducer() -> None:
    views = TrainingConfig(global_batch=16, micro_batch=2, dtype="bf16", gradient_as_bucket_view=True)
    assert not _copies(_plan("ddp", 4, views)[0])
    assert _copies(_plan("ddp", 1, TrainingConfig(global_batch=2, micro_batch=2, dtype="bf16"))[0])


def test_each_all_reduce_waits_for_its_bucket_copy() -> None:
    plan, _ = _plan("ddp", 4)
    by_id = {op.id: op for op in plan.ops}
    for op in plan.ops:
        if op.kind == "all_reduce":
            assert any(by_id[d].kind == "copy" for d in op.after)


def test_fsdp_copies_out_each_gather_and_copies_in_each_reduce_scatter_on_its_stream() -> None:
    plan, ctx = _plan("fsdp", 4)
    gathers = [op for op in plan.ops if op.kind == "all_gather"]
    scatters = [op for op in plan.ops if op.kind == "reduce_scatter"]
    outs = [op for op in _copies(plan) if "copy-out" in op.name]
    assert len(outs) == len(gathers) and not [op for op in _copies(plan) if "copy-in" in op.name]
    for gather, out in zip(gathers, outs, strict=True):  # the unit's full bytes, read and written
        assert out.duration_s == pytest.approx(2 * gather.bytes / 1.5e12)
    for scatter in scatters:  # the collective's own time plus its copy-in on the same stream
        alone = ctx.collective("reduce_scatter", scatter.bytes, ctx.world).time_s
        assert scatter.duration_s == pytest.approx(alone + 2 * scatter.bytes / 1.5e12)


@pytest.mark.parametrize("name", ["zero1", "zero2"])
def test_zero_copies_gradients_into_buckets(name: str) -> None:
    plan, ctx = _plan(name, 4)
    ins = _copies(plan)
    assert ins and math.fsum(op.duration_s for op in ins) == pytest.approx(
        2 * ctx.workload.params * CONFIG.grad_bytes / 1.5e12 * ctx.accumulation
        if name == "zero2"
        else 2 * ctx.workload.params * CONFIG.grad_bytes / 1.5e12
    )


def test_a_timer_without_memory_bandwidth_copies_for_free() -> None:
    plan, _ = _plan("fsdp", 4, bandwidth=None)
    assert _copies(plan) and all(op.duration_s == 0.0 for op in _copies(plan))


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(["ddp", "fsdp", "zero1", "zero2", "zero3"]),
    gpus=st.sampled_from([2, 4, 8]),
    scale=st.floats(1.0, 100.0),
)
def test_more_memory_bandwidth_is_never_slower(name: str, gpus: int, scale: float) -> None:
    def step(bandwidth: float) -> float:
        ctx = toy_context(gpus, CONFIG)
        ctx.timer = RateTimer(memory_bandwidth_Bps=bandwidth)
        return simulate_step(get_strategy(name), ctx).run.step_time_s

    assert step(1e11 * scale) <= step(1e11) * (1 + 1e-9)
