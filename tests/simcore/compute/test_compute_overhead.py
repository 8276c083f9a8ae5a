"""Framework overhead per operator: the operator table, how ComputeModel charges a calibrated
per-operator cost on CPU (added) and GPU (overlapped), and the optimizer's per-tensor dispatch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.calibration.profile import CalibrationProfile, ClusterDescription, ComputeCurve
from simcore.compute.roofline import ComputeModel, layer_operator_count, param_tensor_count
from simcore.hardware import device_spec
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer, Workload

CPU = device_spec("cpu")
A100 = device_spec("a100-sxm-80gb")
KINDS = ["linear", "norm", "attention", "conv", "embedding", "activation", "elementwise", "pool", "other"]


def _profile(kind: str = "cpu", fwd: float | None = 20e-6, bwd: float | None = 30e-6) -> CalibrationProfile:
    overhead = {k: v for k, v in (("fwd", fwd), ("bwd", bwd)) if v is not None}
    cluster = ClusterDescription("gloo", kind, "", 2, 2, 1)
    dtype = "fp32" if kind == "cpu" else "bf16"
    return CalibrationProfile(
        cluster,
        compute={dtype: ComputeCurve(dtype, 1e11 if kind == "cpu" else 2e14, 1e6)},
        memory_bandwidth_Bps=1e10 if kind == "cpu" else 1.5e12,
        op_overhead_s=overhead,
    )


def _layer(kind: str, flops: float = 1e8, params: int = 1000) -> Layer:
    return Layer("x", kind, -1, params, flops, 2 * flops, 0.0, 0.0, 1e4)


def test_operator_table_is_the_traced_counts() -> None:
    assert (layer_operator_count("linear", "fwd"), layer_operator_count("linear", "bwd")) == (4, 13)
    assert layer_operator_count("norm", "recompute") == layer_operator_count("norm", "fwd") == 1
    assert layer_operator_count("no-such-kind", "bwd") == 2  # the documented default


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("phase", ["fwd", "bwd", "recompute"])
def test_cpu_adds_operators_times_the_measured_cost(kind: str, phase: str) -> None:
    model = ComputeModel(CPU, "fp32", _profile())
    layer = _layer(kind)
    per_op = 30e-6 if phase == "bwd" else 20e-6
    workload = Workload("w", (layer,), (), "fp32", 0, "test")
    kernel, host = model.layer_parts_s(workload, 4, phase)
    assert host[0] == pytest.approx(layer_operator_count(kind, phase) * per_op)
    assert model.layer_time_s(layer, 4, phase) == pytest.approx(kernel[0] + host[0])


def test_gpu_overlaps_dispatch_with_kernels() -> None:
    model = ComputeModel(A100, "bf16", _profile("gpu"))
    big, tiny = _layer("linear", 1e12), _layer("linear", 1e3)
    assert model.layer_time_s(big, 1, "fwd") == pytest.approx(1e12 / 2e14, rel=0.01)  # kernel-bound
    assert model.layer_time_s(tiny, 1, "fwd") == pytest.approx(4 * 20e-6)  # host-bound: 4 ops


def test_missing_backward_overhead_falls_back_to_forward() -> None:
    only_fwd = ComputeModel(CPU, "fp32", _profile(bwd=None))
    both = ComputeModel(CPU, "fp32", _profile(bwd=20e-6))
    layer = _layer("linear")
    assert only_fwd.layer_time_s(layer, 2, "bwd") == pytest.approx(both.layer_time_s(layer, 2, "bwd"))


def test_uncalibrated_gpu_keeps_the_kernel_gap_and_the_default_dispatch() -> None:
    model = ComputeModel(A100, "bf16")
    layer = _layer("linear", 1e3, 0)
    workload = Workload("w", (layer,), (), "bf16", 0, "test")
    kernel, host = model.layer_parts_s(workload, 1, "bwd")
    assert kernel[0] == pytest.approx(
        max(2e3 / float(model.achieved_flops(1e3, "gemm", "bwd")), 2e4 / model.memory_bandwidth_Bps)
        + 2 * model.curve.kernel_overhead_s
    )
    assert host[0] == pytest.approx(13 * model.curve.host_op_s[1])


def test_single_tensor_optimizer_dispatch_per_tensor_adds_on_cpu() -> None:
    from simcore.compute.optimizer import optimizer_step_cost

    cpu = ComputeModel(CPU, "fp32", _profile())
    cost = optimizer_step_cost("sgd-momentum", "single", 30_000, 30, 4)
    assert cost.host_ops == 30 * 3
    device = cost.bytes_moved / cpu.memory_bandwidth_Bps
    assert cpu.optimizer_step_time_s(cost) == pytest.approx(device + 30 * 3 * 20e-6)


def test_param_tensors_count_weights_and_biases() -> None:
    layers = (_layer("embedding"), _layer("linear"), _layer("attention", params=0), _layer("norm"))
    assert param_tensor_count(Workload("w", layers, (), "fp32", 0, "test")) == 1 + 2 + 2


def test_step_compute_includes_the_optimizer_dispatch() -> None:
    workload = load_workload("gpt2-small")
    with_overhead = ComputeModel(CPU, "fp32", _profile())
    step = with_overhead.step_compute_time_s(workload, 1, optimizer="sgd-momentum")
    parts = sum(with_overhead.phase_time_s(workload, 1, p) for p in ("fwd", "bwd"))
    bytes_only = workload.params * 32 / with_overhead.memory_bandwidth_Bps  # foreach accesses 2+3+3
    assert step - parts - bytes_only == pytest.approx(param_tensor_count(workload) * 3 * 20e-6)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    phase=st.sampled_from(["fwd", "bwd", "recompute"]),
    low=st.floats(1e-7, 1e-4),
    factor=st.floats(1.0, 10.0),
    gpu=st.booleans(),
)
def test_more_overhead_is_never_faster(kind: str, phase: str, low: float, factor: float, gpu: bool) -> None:
    def time(per_op: float) -> float:
        device, dtype = (A100, "bf16") if gpu else (CPU, "fp32")
        model = ComputeModel(device, dtype, _profile("gpu" if gpu else "cpu", per_op, per_op))
        return model.layer_time_s(_layer(kind), 2, phase)

    assert time(low * factor) >= time(low)
