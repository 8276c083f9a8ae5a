"""Precision modes as the frameworks run them, and the optimizer step as torch.optim runs it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.optimizer import (
    check_impl_supported,
    master_cast_bytes,
    optimizer_spec,
    optimizer_step_cost,
    resolve_optimizer_impl,
)
from simcore.compute.precision import PRECISION_MODES, Precision, check_precision
from simcore.compute.precision import resolve_precision as resolve_for_framework
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies import get_strategy
from simcore.strategies.base import framework_of


def resolve_precision(mode: str, dtype: str, strategy: str, *, master_weights: bool = True) -> Precision:
    """The precision the strategy (or parameter-server mode) named ``strategy`` runs with."""
    runs = strategy if strategy.startswith("ps") else get_strategy(strategy)
    return resolve_for_framework(
        mode, dtype, strategy, framework=framework_of(runs), master_weights=master_weights
    )


def test_auto_is_what_each_framework_runs() -> None:
    assert resolve_precision("auto", "bf16", "ddp").mode == "amp"
    assert resolve_precision("auto", "bf16", "fsdp").mode == "fsdp-mp"
    assert resolve_precision("auto", "bf16", "hsdp").mode == "fsdp-mp"
    assert resolve_precision("auto", "bf16", "zero2").mode == "mixed"
    assert resolve_precision("auto", "bf16", "ps-async").mode == "amp"
    assert resolve_precision("auto", "bf16", "ddp", master_weights=False).mode == "pure"
    assert resolve_precision("auto", "fp8", "ddp").mode == "mixed"
    assert resolve_precision("auto", "tf32", "fsdp").compute_dtype == "tf32"


def test_dtypes_of_each_mode() -> None:
    amp = resolve_precision("amp", "bf16", "ddp")
    assert (amp.param_dtype, amp.grad_dtype, amp.reduce_dtype, amp.compute_dtype, amp.autocast) == (
        "fp32",
        "fp32",
        "fp32",
        "bf16",
        True,
    )
    assert resolve_precision("amp-compress", "bf16", "ddp").reduce_dtype == "bf16"
    mp = resolve_precision("fsdp-mp", "bf16", "fsdp")
    assert (mp.param_dtype, mp.gather_dtype, mp.unsharded_grad_dtype, mp.reduce_dtype) == (
        "fp32",
        "bf16",
        "bf16",
        "fp32",
    )
    assert resolve_precision("fsdp-mp-low", "bf16", "fsdp").reduce_dtype == "bf16"
    mixed = resolve_precision("mixed", "bf16", "zero1")
    assert mixed.master and mixed.param_dtype == "bf16" and mixed.state_dtype == "fp32"
    fp32 = resolve_precision("fp32", "fp32", "ddp")
    assert fp32.compute_dtype == "fp32" and fp32.conv_dtype == "tf32"  # cudnn.allow_tf32 defaults on


@given(mode=st.sampled_from(PRECISION_MODES), dtype=st.sampled_from(["bf16", "fp16", "fp8"]))
def test_every_mode_resolves_or_says_why(mode: str, dtype: str) -> None:
    for strategy in ("ddp", "fsdp", "zero3"):
        try:
            precision = resolve_precision(mode, dtype, strategy)
        except TrainsimError as exc:
            assert "--strategies" in str(exc) or "--dtype" in str(exc)
        else:
            assert precision.bytes("param") in (2, 4) and precision.bytes("reduce") in (2, 4)


def test_devices_without_the_dtype_are_refused() -> None:
    a100, v100 = device_spec("a100-sxm-80gb"), device_spec("v100-sxm2-16gb")
    with pytest.raises(TrainsimError, match="no fp8 tensor cores"):
        check_precision(resolve_precision("auto", "fp8", "ddp"), a100.peak_flops, a100.name)
    with pytest.raises(TrainsimError, match="no bf16 tensor cores"):
        check_precision(resolve_precision("auto", "bf16", "ddp"), v100.peak_flops, v100.name)
    check_precision(resolve_precision("auto", "fp16", "ddp"), v100.peak_flops, v100.name)
    h100 = device_spec("h100-sxm")
    check_precision(resolve_precision("auto", "fp8", "ddp"), h100.peak_flops, h100.name)


def test_adamw_bytes_per_parameter_by_implementation() -> None:
    """torch/optim/adam.py, torch 2.13: foreach 8 passes, 80 B; fused 28 B; single = foreach's bytes."""
    assert len(optimizer_spec("adamw").foreach_accesses) == 8
    foreach = optimizer_step_cost("adamw", "foreach", 1e6, 100, 4)
    assert foreach.bytes_moved == 80e6 and foreach.passes == 8 and foreach.host_ops == 8
    assert optimizer_step_cost("adamw", "fused", 1e6, 100, 4).bytes_moved == 28e6
    single = optimizer_step_cost("adamw", "single", 1e6, 100, 4)
    assert single.bytes_moved == 80e6 and single.host_ops == 100 * 10 and single.kernels == 100 * 8
    assert optimizer_step_cost("sgd-momentum", "foreach", 1e6, 100, 4).bytes_moved == 32e6
    assert master_cast_bytes(1e6, 2) == 12e6  # grads up-cast (2 + 4) and master copied back (4 + 2)


def test_foreach_launches_follow_multi_tensor_apply_limits() -> None:
    # 1000 tiny tensors: at most 110 per launch for a 2-list op; 30 big ones: 320 x 65536 elements each
    many = optimizer_step_cost("sgd", "foreach", 1e3, 1000, 4)
    assert many.kernels == -(-1000 // 64)  # add_(p, g): two lists
    big = optimizer_step_cost("sgd", "foreach", 30 * 320 * 65536, 30, 4)
    assert big.kernels == 30


def test_implementation_defaults_and_errors() -> None:
    assert resolve_optimizer_impl("auto", "gpu") == "foreach"
    assert resolve_optimizer_impl("auto", "cpu") == "single"
    assert resolve_optimizer_impl("auto", "gpu", "deepspeed") == "fused"
    with pytest.raises(TrainsimError, match="optimizer implementation 'vector' unknown"):
        resolve_optimizer_impl("vector", "gpu")
    check_impl_supported("fused", "gpu", "a100-sxm-80gb")
    with pytest.raises(TrainsimError, match="no fused optimizer kernels"):
        check_impl_supported("fused", "tpu", "tpu-v4")
