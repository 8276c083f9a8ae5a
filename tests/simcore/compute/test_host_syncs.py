"""Host syncs of the training loops (simcore.compute.host_syncs, data/host_syncs.yaml)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simcore.compute.host_syncs import host_sync_time_s, launch_latency_s, syncs_per_step
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.workload.types import Layer, Workload
from tests.simcore.strategies.test_strategies_support import toy_context


@pytest.mark.parametrize(
    ("framework", "count"), [("torch-ddp", 1), ("torch-fsdp", 2), ("deepspeed", 1), ("torch-ps", 0)]
)
def test_the_loops_sync_counts(framework: str, count: float) -> None:
    """imagenet/main.py loss.item(); fms-fsdp clip_grad_norm_().item() + loss.item(); DeepSpeed's
    total_norm_cuda[0].item(); the parameter server waits on its pushes (communication)."""
    assert syncs_per_step(framework) == count


def test_one_sync_is_one_dispatch_plus_one_launch() -> None:
    assert launch_latency_s() == 5e-6
    assert host_sync_time_s(2, 8e-6) == pytest.approx(2 * (8e-6 + 5e-6))
    assert host_sync_time_s(2, 8e-6, device_kind="cpu") == 0.0
    assert host_sync_time_s(0, 8e-6) == 0.0


def test_an_unknown_framework_is_named() -> None:
    with pytest.raises(TrainsimError, match="no framework 'jax'"):
        syncs_per_step("jax")


def test_the_optimizer_step_carries_the_syncs_and_the_config_overrides_them() -> None:
    ctx, fsdp = toy_context(1), get_strategy("fsdp")
    none = toy_context(1, TrainingConfig(dtype="fp32", host_syncs_per_step=0.0))
    one = toy_context(1, TrainingConfig(dtype="fp32", host_syncs_per_step=1.0))
    per_sync = ctx.host_op_s("fwd") + 5e-6
    base = none.optimizer_step(fsdp, 1e6, 1).seconds
    assert one.optimizer_step(fsdp, 1e6, 1).seconds - base == pytest.approx(per_sync)
    assert toy_context(1, TrainingConfig(dtype="fp32")).optimizer_step(fsdp, 1e6, 1).seconds - base == (
        pytest.approx(2 * per_sync)
    )


def test_training_config_refuses_a_negative_count() -> None:
    with pytest.raises(TrainsimError, match=r"host_syncs_per_step must be 0\.\.1000"):
        TrainingConfig(host_syncs_per_step=-1)


def test_a_gpu_timer_prices_the_dispatch() -> None:
    model = ComputeModel(device_spec("h100-sxm"), "bf16")
    assert host_sync_time_s(1, model.host_op_s("fwd")) == pytest.approx(model.host_op_s("fwd") + 5e-6)


def _kernel_s(model: ComputeModel, layer: Layer, batch: int, phase: str) -> float:
    work = Workload(
        name="w", layers=(layer,), block_names=("block0",), dtype="fp16", tokens_per_sample=1, source="t"
    )
    return float(model.layer_parts_s(work, batch, phase)[0][0])


@pytest.mark.parametrize("batch", [1, 64])
def test_a_layers_own_syncs_idle_the_device_once_per_call_whatever_the_batch(batch: int) -> None:
    """Layer.host_syncs: each forward sync adds one dispatch (host_op_s, 8 us forward on a GPU) plus
    one launch (5 us) to the layer's kernel time at any batch, again in a recompute (a forward);
    backward has none of them; a CPU rank (no queue to drain) none at all."""
    plain = Layer("res", "elementwise", 0, 0, 0.0, 0.0, 0.0, 1e6, 3e6)
    synced = replace(plain, host_syncs=(2.0, 0.0))
    gpu = ComputeModel(device_spec("a100-sxm-80gb"), "fp16")
    one = 8e-6 + 5e-6
    for phase, syncs in (("fwd", 2), ("recompute", 2), ("bwd", 0)):
        extra = _kernel_s(gpu, synced, batch, phase) - _kernel_s(gpu, plain, batch, phase)
        assert extra == pytest.approx(syncs * one, rel=1e-9, abs=1e-15)
    cpu = ComputeModel(device_spec("cpu"), "fp32")
    assert _kernel_s(cpu, synced, batch, "fwd") == _kernel_s(cpu, plain, batch, "fwd")
