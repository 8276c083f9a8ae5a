"""ComputeModel: the roofline, its efficiency curve, calibration override, optimizer and step time."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.optimizer import optimizer_step_cost
from simcore.compute.roofline import ComputeModel, efficiency_curve, param_tensor_count
from simcore.errors import TrainsimError
from simcore.hardware import DeviceSpec, device_names, device_spec
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer

A100 = device_spec("a100-sxm-80gb")


def _device(peak: float = 100e12, bandwidth: float = 1e12, name: str = "a100-test") -> DeviceSpec:
    return DeviceSpec(name, "gpu", 80 * 2**30, bandwidth, MappingProxyType({"bf16": peak}), "test")


@dataclass(frozen=True)
class FakeProfile:
    """Stands in for simcore.calibration.profile.CalibrationProfile (the two members ComputeModel reads)."""

    rate_Bps: float | None
    memory_bandwidth_Bps: float | None

    op_overhead_s = None

    def compute_rate(self, flops: float, dtype: str) -> float | None:
        return self.rate_Bps if dtype == "bf16" else None


def _matmul(flops: float, params: int = 0, moved: float = 0.0) -> Layer:
    return Layer("mm", "linear", 0, params, flops, 2 * flops, 0.0, 0.0, moved)


def test_every_known_device_has_an_efficiency_curve() -> None:
    for name in device_names():
        curve = efficiency_curve(device_spec(name))
        assert 0 < curve.max_efficiency <= 1 and 0 < curve.memory_efficiency <= 1


def _kernel_s(model: ComputeModel, layer: Layer, batch: int = 1, phase: str = "fwd") -> float:
    """The device (kernel) side of one layer."""
    from simcore.workload.types import Workload

    kernel, _ = model.layer_parts_s(
        Workload("w", (replace(layer, block=-1),), (), "bf16", 0, "test"), batch, phase
    )
    return float(kernel[0])


def test_large_matmul_runs_near_the_plateau_and_small_one_far_below() -> None:
    model = ComputeModel(A100, "bf16")
    curve = model.curve
    big, small = 1e13, 1e8
    big_rate = big / (_kernel_s(model, _matmul(big)) - curve.kernel_overhead_s)
    small_rate = small / (_kernel_s(model, _matmul(small)) - curve.kernel_overhead_s)
    assert big_rate == pytest.approx(312e12 * curve.max_efficiency, rel=0.01)
    assert small_rate < 0.1 * big_rate


def test_kernel_classes_have_their_own_plateaus() -> None:
    """Attention and convolutions run below the GEMM plateau; attention's backward below its forward."""
    model = ComputeModel(A100, "bf16")
    flops = 1e13
    gemm = _kernel_s(model, _matmul(flops))
    attention = Layer("attn", "attention", 0, 0, flops, 2.5 * flops, 0.0, 0.0, 0.0)
    conv = replace(_matmul(flops), kind="conv")
    assert _kernel_s(model, attention) > gemm and _kernel_s(model, conv) > gemm
    fwd_rate = flops / _kernel_s(model, attention)
    bwd_rate = 2.5 * flops / _kernel_s(model, attention, phase="bwd")
    assert bwd_rate < fwd_rate
    assert fwd_rate == pytest.approx(312e12 * model.curve.attention_fwd_efficiency, rel=0.01)


def test_fp32_runs_matmuls_on_cuda_cores_and_convolutions_in_tf32() -> None:
    """PyTorch's defaults: matmul allow_tf32 off, cuDNN allow_tf32 on (Ampere and later)."""
    fp32 = ComputeModel(A100, "fp32")
    assert fp32.class_dtypes == {
        "gemm": "fp32",
        "conv1x1": "tf32",
        "conv": "tf32",
        "conv_grouped": "tf32",
        "attention": "fp32",
    }
    assert ComputeModel(A100, "tf32").class_dtypes["gemm"] == "tf32"
    assert ComputeModel(device_spec("v100-sxm2-16gb"), "fp32").class_dtypes["conv"] == "fp32"
    conv = replace(_matmul(1e13), kind="conv")
    assert _kernel_s(fp32, conv) < _kernel_s(fp32, _matmul(1e13))


def test_wave_quantisation_penalises_a_gemm_of_few_tiles() -> None:
    """A 129-row GEMM needs two 128-row tiles, half of them empty (gemm_shape source)."""
    model = ComputeModel(A100, "bf16")
    full = replace(_matmul(2.0 * 128 * 4096 * 4096), gemm=(128, 4096, 4096))
    ragged = replace(_matmul(2.0 * 129 * 4096 * 4096), gemm=(129, 4096, 4096))
    rate_full = full.fwd_flops / _kernel_s(model, full)
    rate_ragged = ragged.fwd_flops / _kernel_s(model, ragged)
    assert rate_ragged < 0.8 * rate_full


def test_wave_quantisation_stretches_the_arithmetic_not_the_launch_latency() -> None:
    """A 1 x 2048 x 10 GEMM (a classifier head at batch 1) fills one 128 x 128 tile to 10 / 16384 and
    one wave of 4 split-K units on 108 SMs: its arithmetic at the plateau rate stretched by 1 / w
    plus the size curve's fixed latency, not the whole curve time divided by w (0.5 s before)."""
    model = ComputeModel(A100, "bf16")
    flops = 2.0 * 1 * 2048 * 10
    head = replace(_matmul(flops), gemm=(1, 2048, 10))
    wave = (1 * 10 / (128 * 128)) * (4 / 108)  # tile use x (units / SMs) / ceil(waves)
    plateau = 312e12 * model.curve.max_efficiency
    latency = model.curve.half_efficiency_time_s / model.curve.max_efficiency
    expected = flops / plateau / wave + latency + model.curve.kernel_overhead_s
    assert _kernel_s(model, head) == pytest.approx(expected, rel=1e-9)
    assert _kernel_s(model, head) < 1e-4


def test_half_efficiency_point() -> None:
    model = ComputeModel(A100, "bf16")
    half_flops = 312e12 * model.curve.half_efficiency_time_s
    rate = model.achieved_flops(half_flops)
    assert float(rate) == pytest.approx(312e12 * model.curve.max_efficiency / 2)


def test_memory_bound_layer_limited_by_bandwidth() -> None:
    model = ComputeModel(A100, "bf16")
    norm = Layer("norm", "norm", 0, 0, 0.0, 0.0, 0.0, 0.0, 1e9)
    expected = (
        1e9 / (A100.memory_bandwidth_Bps * model.curve.memory_efficiency) + model.curve.kernel_overhead_s
    )
    assert model.layer_time_s(norm, 1, "fwd") == pytest.approx(expected)


def test_backward_twice_forward_for_matmuls_and_recompute_equals_forward() -> None:
    model = ComputeModel(A100, "bf16")
    layer = _matmul(1e12)
    fwd = model.layer_time_s(layer, 4, "fwd")
    overhead = model.curve.kernel_overhead_s
    assert model.layer_time_s(layer, 4, "bwd") - 2 * overhead == pytest.approx(2 * (fwd - overhead))
    assert model.layer_time_s(layer, 4, "recompute") == fwd


def test_gpu_host_dispatch_decides_tiny_layers() -> None:
    """The host enqueues 4 operators for a linear layer: a tiny one is dispatch-bound on a GPU."""
    model = ComputeModel(A100, "bf16")
    tiny = _matmul(1e3)
    assert model.layer_time_s(tiny, 1, "fwd") == pytest.approx(4 * model.curve.host_op_s[0])


def test_calibration_profile_replaces_defaults() -> None:
    profile = FakeProfile(rate_Bps=50e12, memory_bandwidth_Bps=1e12)
    model = ComputeModel(A100, "bf16", profile)  # type: ignore[arg-type]
    overhead = model.curve.kernel_overhead_s
    assert model.layer_time_s(_matmul(1e12), 1, "fwd") == pytest.approx(1e12 / 50e12 + overhead)
    assert model.memory_bandwidth_Bps == 1e12
    partial = ComputeModel(A100, "bf16", FakeProfile(rate_Bps=None, memory_bandwidth_Bps=None))  # type: ignore[arg-type]
    assert partial.layer_time_s(_matmul(1e12), 1, "fwd") == ComputeModel(A100, "bf16").layer_time_s(
        _matmul(1e12), 1, "fwd"
    )


def test_optimizer_time_is_memory_bound_by_implementation() -> None:
    """Large updates: foreach AdamW moves 80 B per fp32 parameter, fused 28 B (torch/optim/adam.py)."""
    model = ComputeModel(A100, "bf16")
    params = 10**9
    for impl, per_param in (("foreach", 80), ("fused", 28)):
        cost = optimizer_step_cost("adamw", impl, params, 100, 4)
        assert cost.bytes_moved == params * per_param
        seconds = model.optimizer_step_time_s(cost)
        assert seconds == pytest.approx(
            params * per_param / model.memory_bandwidth_Bps + cost.kernels * model.curve.kernel_overhead_s
        )
    assert model.optimizer_time_s(10**9, "sgd") < model.optimizer_time_s(10**9, "sgd-momentum")
    assert model.optimizer_time_s(10**9, "sgd-momentum") < model.optimizer_time_s(10**9, "adam")
    assert model.optimizer_time_s(0, "adam") == 0.0


def test_single_tensor_optimizer_is_dispatch_bound_on_many_small_tensors() -> None:
    model = ComputeModel(A100, "bf16")
    single = optimizer_step_cost("adamw", "single", 1e6, 1000, 4)
    foreach = optimizer_step_cost("adamw", "foreach", 1e6, 1000, 4)
    assert single.host_ops == 1000 * 10 and foreach.host_ops == 8
    assert model.optimizer_step_time_s(single) == pytest.approx(1000 * 10 * model.curve.host_op_s[0])
    assert model.optimizer_step_time_s(single) > 10 * model.optimizer_step_time_s(foreach)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.optimizer_time_s(10, "lamb"), "unknown optimizer 'lamb'; allowed: sgd"),
        (lambda m: m.layer_time_s(_matmul(1.0), 1, "forward"), "unknown phase 'forward'; allowed: fwd"),
        (lambda m: m.layer_time_s(_matmul(1.0), 0, "fwd"), "batch must be a positive integer"),
    ],
)
def test_bad_arguments_are_user_errors(call, message) -> None:
    with pytest.raises(TrainsimError, match=message):
        call(ComputeModel(A100, "bf16"))


def test_unsupported_dtype_names_allowed_ones() -> None:
    with pytest.raises(TrainsimError, match="bf16"):
        ComputeModel(device_spec("v100-sxm2-32gb"), "bf16")


def test_vectorised_layer_times_match_per_layer_and_are_cached() -> None:
    model = ComputeModel(A100, "bf16")
    workload = load_workload("gpt2-small")
    times = model.layer_times_s(workload, 8, "bwd")
    assert times is model.layer_times_s(workload, 8, "bwd")
    singles = [model.layer_time_s(layer, 8, "bwd") for layer in workload.layers]
    np.testing.assert_allclose(times, singles, rtol=1e-12)
    blocks = model.block_times_s(workload, 8, "bwd")
    assert len(blocks) == 12 and blocks.sum() < times.sum()


def test_step_compute_time_adds_phases_recompute_and_optimizer() -> None:
    model = ComputeModel(A100, "bf16")
    w = load_workload("llama2-7b")
    plain = model.step_compute_time_s(w, 1)
    assert plain == pytest.approx(model.phase_time_s(w, 1, "fwd") + model.phase_time_s(w, 1, "bwd"))
    assert model.step_compute_time_s(w, 1, recompute=True) > plain
    with_adam = model.step_compute_time_s(w, 1, optimizer="adam")
    assert with_adam == pytest.approx(
        plain + model.optimizer_time_s(w.params, "adam", tensors=param_tensor_count(w))
    )
    sharded = model.step_compute_time_s(w, 1, optimizer="adam", optimizer_params=w.params // 8)
    assert plain < sharded < with_adam


def test_llama2_7b_mfu_on_a100_is_plausible() -> None:
    """Compute only: below the GEMM plateau and above half of peak (Narayanan et al. report ~52-57%
    end to end with communication)."""
    model = ComputeModel(A100, "bf16")
    w = load_workload("llama2-7b")
    mfu = 6 * w.params * w.tokens_per_sample / model.step_compute_time_s(w, 1) / 312e12
    assert 0.5 < mfu < model.curve.max_efficiency


layer_st = st.builds(
    _matmul,
    flops=st.floats(1e3, 1e14),
    params=st.integers(0, 10**9),
    moved=st.floats(0, 1e10),
)
phase_st = st.sampled_from(["fwd", "bwd", "recompute"])


@settings(max_examples=100, deadline=None)
@given(layer_st, st.integers(1, 512), st.integers(1, 512), phase_st)
def test_time_monotone_in_batch(layer: Layer, a: int, b: int, phase: str) -> None:
    model = ComputeModel(_device(), "bf16")
    small, large = sorted((a, b))
    assert model.layer_time_s(layer, small, phase) <= model.layer_time_s(layer, large, phase)


@settings(max_examples=100, deadline=None)
@given(layer_st, st.floats(1.0, 100.0), st.integers(1, 64), phase_st)
def test_time_monotone_in_flops(layer: Layer, factor: float, batch: int, phase: str) -> None:
    model = ComputeModel(_device(), "bf16")
    bigger = replace(layer, fwd_flops=layer.fwd_flops * factor, bwd_flops=layer.bwd_flops * factor)
    assert model.layer_time_s(layer, batch, phase) <= model.layer_time_s(bigger, batch, phase) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(layer_st, st.floats(1.0, 10.0), st.floats(1.0, 10.0), st.integers(1, 64), phase_st)
def test_faster_device_never_slower(layer: Layer, peak_x: float, bw_x: float, batch: int, phase: str) -> None:
    slow = ComputeModel(_device(), "bf16")
    fast = ComputeModel(_device(peak=100e12 * peak_x, bandwidth=1e12 * bw_x), "bf16")
    assert fast.layer_time_s(layer, batch, phase) <= slow.layer_time_s(layer, batch, phase) * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["gpt2-small", "resnet50", "bert-base"]), st.integers(1, 64))
def test_recompute_adds_time(name: str, batch: int) -> None:
    model = ComputeModel(A100, "bf16")
    w = load_workload(name)
    assert model.step_compute_time_s(w, batch, recompute=True) > model.step_compute_time_s(w, batch)
    assert math.isfinite(model.step_compute_time_s(w, batch, recompute=True))


def test_real_calibration_profile_drives_the_rate() -> None:
    from simcore.calibration.profile import CalibrationProfile, ClusterDescription, ComputeCurve

    cluster = ClusterDescription("nccl", "gpu", "a100-sxm-80gb", 8, 8, 1)
    profile = CalibrationProfile(
        cluster, compute={"bf16": ComputeCurve("bf16", 200e12, 1e9)}, memory_bandwidth_Bps=1.5e12
    )
    model = ComputeModel(A100, "bf16", profile)
    layer = _matmul(1e9)
    assert _kernel_s(model, layer) == pytest.approx(1e9 / 100e12 + model.curve.kernel_overhead_s)
    assert model.memory_bandwidth_Bps == 1.5e12


def test_cudnn_v3_era_prices_fp32_convolutions_at_its_plateau() -> None:
    """A 2015 stack (cuDNN v3, no Winograd) runs fp32 convolutions at 0.40 of peak (efficiency.yaml
    software_eras: convnet-benchmarks' GoogLeNet R3 row), the current stack at the device's 1.00."""
    gtx = device_spec("gtx-980")
    conv = Layer("conv", "conv", 0, 0, 1e12, 2e12, 0.0, 0.0, 0.0)
    now, old = ComputeModel(gtx, "fp32"), ComputeModel(gtx, "fp32", software_era="cudnn-v3")
    plateau = 4.98e12 * 1e12 / (1e12 + 4.98e12 * now.curve.half_efficiency_time_s)
    gap = now.curve.kernel_overhead_s
    assert old.layer_time_s(conv, 1, "fwd") == pytest.approx(1e12 / (0.40 * plateau) + gap)
    assert now.layer_time_s(conv, 1, "fwd") == pytest.approx(1e12 / (1.00 * plateau) + gap)
    # matmuls are not convolutions: the era leaves them alone
    assert old.layer_time_s(_matmul(1e12), 1, "fwd") == now.layer_time_s(_matmul(1e12), 1, "fwd")


def test_unknown_software_era_is_refused() -> None:
    with pytest.raises(TrainsimError, match="unknown software era 'cudnn-v1'; allowed: current, cudnn-v3"):
        ComputeModel(A100, "bf16", software_era="cudnn-v1")


@pytest.mark.parametrize(("dtype", "peak"), [("fp16", 70e12), ("bf16", 70e12), ("tf32", 35e12)])
def test_a10g_tensor_core_gemms_plateau_at_the_peak(dtype: str, peak: float) -> None:
    """GA102's half-rate FP32-accumulate tensor cores: a 10240^3 GEMM at 1.00 of the peak (ga102
    source), times the curve's size term ``F / (F + peak * half_s)``; FP32 SGEMM plateaus at GA102's
    0.70 (ga10x_sgemm source)."""
    model = ComputeModel(device_spec("a10g"), dtype)
    flops = 2.0 * 10240**3
    size = flops / (flops + peak * model.curve.half_efficiency_time_s)
    expected = flops / (peak * 1.00 * size) + model.curve.kernel_overhead_s
    assert _kernel_s(model, _matmul(flops)) == pytest.approx(expected, rel=1e-9)
    fp32 = ComputeModel(device_spec("a10g"), "fp32")
    assert fp32.curve.plateau("gemm", "fwd", "fp32") == pytest.approx(0.70)


def test_serial_memory_kernels_add_to_the_gemms_and_backward_bytes_follow_the_layer() -> None:
    """A layer of 1e12 FLOPs and 1 GB forward, 40% of it in memory-bound kernels between its GEMMs,
    backward 1.5x the bytes with 60% between: on a 100 TFLOP/s, 1 TB/s device (memory efficiency
    0.8, plateau 0.8) forward = max(F / rate, 0.6 GB / bw) + 0.4 GB / bw, backward likewise."""
    device = _device(peak=100e12, bandwidth=1e12)
    model = ComputeModel(device, "bf16")
    bw = 1e12 * model.curve.memory_efficiency
    flops, moved = 1e12, 1e9
    layer = replace(
        _matmul(flops, moved=moved), kind="attention_math", bwd_bytes_ratio=1.5, serial_fraction=(0.4, 0.6)
    )
    gap = model.curve.kernel_overhead_s
    fwd_compute = flops / float(model.achieved_flops(flops, "gemm", "fwd"))
    assert _kernel_s(model, layer) == pytest.approx(max(fwd_compute, 0.6e9 / bw) + 0.4e9 / bw + gap)
    half = flops  # backward: two GEMMs of the forward's size
    bwd_compute = 2 * half / float(model.achieved_flops(half, "gemm", "bwd"))
    expected = max(bwd_compute, 0.4 * 1.5e9 / bw) + 0.6 * 1.5e9 / bw + 2 * gap
    assert _kernel_s(model, layer, phase="bwd") == pytest.approx(expected)
    # the defaults keep the one-kernel rule: max(compute, bytes), backward twice the bytes
    plain = _matmul(flops, moved=moved)
    assert _kernel_s(model, plain, phase="bwd") == pytest.approx(max(bwd_compute, 2e9 / bw) + 2 * gap)
