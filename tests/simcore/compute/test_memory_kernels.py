"""Eager memory-bound kernels at their measured bandwidth, per kind and phase (data/memory_kernels.yaml).

Expected times are computed by hand from the Liger-Kernel rows the data file quotes: bytes over
(datasheet bandwidth x fraction) plus the device's kernel gap per kernel (one forward, two backward).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from simcore.compute.memory_kernels import memory_fractions, memory_kind
from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_spec
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer

A100 = device_spec("a100-sxm-80gb")
H100 = device_spec("h100-sxm")
GAP = 3.0e-6  # efficiency.yaml defaults.gpu.kernel_overhead_s
GB = 1e9


def _memory_layer(kind: str, saved: float = 0.0, out: float = 1.0) -> Layer:
    return Layer(kind, kind, 0, 0, 0.0, 0.0, saved, out, GB)


@dataclass(frozen=True)
class CopyProfile:
    """A calibration profile that measured only a copy bandwidth (the members ComputeModel reads)."""

    memory_bandwidth_Bps: float
    op_overhead_s = None

    def compute_rate(self, flops: float, dtype: str) -> float | None:
        return None


def test_a100_fractions_are_the_liger_a100_rows() -> None:
    fractions = memory_fractions(A100)
    assert fractions["rmsnorm"] == (0.61, 0.47)
    assert fractions["rotary"] == (0.51, 0.86)
    assert fractions["layernorm"] == (0.52, 0.47)
    assert fractions["loss"] == (0.52, 0.53)
    assert fractions["swiglu"] == (0.54, 0.52)


def test_hopper_overrides_its_measured_kinds_only() -> None:
    fractions = memory_fractions(H100)
    assert fractions["rmsnorm"] == (0.82, 0.60)
    assert fractions["layernorm"] == (0.52, 0.50)
    assert fractions["rotary"] == (0.51, 0.86)  # no H100 row: the default
    assert memory_fractions(device_spec("h200-sxm"))["rmsnorm"] == (0.82, 0.60)


def test_cpu_rank_has_no_kernel_table() -> None:
    assert dict(memory_fractions(device_spec("cpu"))) == {}


def test_rmsnorm_forward_and_backward_times_by_hand() -> None:
    model = ComputeModel(A100, "bf16")
    layer = _memory_layer("rmsnorm")
    assert model.layer_time_s(layer, 1, "fwd") == pytest.approx(GB / (2039e9 * 0.61) + GAP)
    assert model.layer_time_s(layer, 1, "recompute") == pytest.approx(GB / (2039e9 * 0.61) + GAP)
    assert model.layer_time_s(layer, 1, "bwd") == pytest.approx(2 * GB / (2039e9 * 0.47) + 2 * GAP)


def test_rotary_backward_is_less_than_twice_its_forward() -> None:
    model = ComputeModel(A100, "bf16")
    layer = _memory_layer("rotary")
    fwd, bwd = model.layer_time_s(layer, 1, "fwd"), model.layer_time_s(layer, 1, "bwd")
    assert fwd == pytest.approx(GB / (2039e9 * 0.51) + GAP)
    assert bwd == pytest.approx(2 * GB / (2039e9 * 0.86) + 2 * GAP)
    assert bwd < 2 * fwd


def test_batchnorm_residual_and_gelu_stay_at_the_streaming_efficiency() -> None:
    model = ComputeModel(H100, "bf16")
    streaming = GB / (3350e9 * 0.80) + GAP
    for layer in (_memory_layer("norm"), _memory_layer("elementwise"), _memory_layer("activation", 1.0)):
        assert model.layer_time_s(layer, 1, "fwd") == pytest.approx(streaming)


def test_gated_activation_is_priced_as_swiglu() -> None:
    gated = _memory_layer("activation", saved=3.0)
    assert memory_kind(gated) == "swiglu"
    assert memory_kind(_memory_layer("activation", saved=1.0)) == "activation"
    model = ComputeModel(H100, "bf16")
    assert model.layer_time_s(gated, 1, "fwd") == pytest.approx(GB / (3350e9 * 0.54) + GAP)


def test_llama_preset_kinds_reach_the_table() -> None:
    """Every eager kernel kind of a Llama block (RMSNorm, rotary, SwiGLU, the loss) is priced by it."""
    kinds = {memory_kind(layer) for layer in load_workload("llama2-7b", seq_len=256).layers}
    assert {"rmsnorm", "rotary", "swiglu", "loss"} <= kinds
    gpt2 = {memory_kind(layer) for layer in load_workload("gpt2-small", seq_len=128).layers}
    assert "layernorm" in gpt2


def test_calibrated_copy_bandwidth_scales_the_kind_figures() -> None:
    model = ComputeModel(A100, "bf16", CopyProfile(1.0e12))  # type: ignore[arg-type]
    layer = _memory_layer("rmsnorm")
    # the measured copy runs at memory_efficiency; RMSNorm at 0.61 / 0.80 of it
    assert model.layer_time_s(layer, 1, "fwd") == pytest.approx(GB / (1.0e12 * 0.61 / 0.80) + GAP)


def test_compiled_rmsnorm_takes_the_liger_share_of_the_eager_time() -> None:
    eager, fused = ComputeModel(A100, "bf16"), ComputeModel(A100, "bf16", compiled=True)
    layer = _memory_layer("rmsnorm")
    assert fused.layer_time_s(layer, 1, "fwd") == pytest.approx(0.095 * GB / (2039e9 * 0.61) + GAP)
    assert fused.layer_time_s(layer, 1, "bwd") == pytest.approx(0.21 * 2 * GB / (2039e9 * 0.47) + 2 * GAP)
    assert eager.layer_time_s(layer, 1, "fwd") > fused.layer_time_s(layer, 1, "fwd")


def test_compiled_fused_kinds_dispatch_one_operator() -> None:
    fused = ComputeModel(H100, "bf16", compiled=True)
    tiny = Layer("rmsnorm", "rmsnorm", 0, 0, 0.0, 0.0, 0.0, 1.0, 1.0)
    _, host = fused.layer_parts_s(load_workload("llama2-7b", seq_len=128), 1, "bwd")
    assert fused.layer_time_s(tiny, 1, "bwd") == pytest.approx(fused.curve.host_op_s[1])
    # eager: HF LlamaRMSNorm's 12 backward operators (efficiency.yaml operators.per_layer)
    assert ComputeModel(H100, "bf16").layer_time_s(tiny, 1, "bwd") == pytest.approx(
        12 * fused.curve.host_op_s[1]
    )
    assert (
        host.sum()
        < ComputeModel(H100, "bf16").layer_parts_s(load_workload("llama2-7b", seq_len=128), 1, "bwd")[1].sum()
    )


def test_compiled_leaves_unfused_kinds_and_cpu_ranks_alone() -> None:
    layer = _memory_layer("elementwise")
    assert ComputeModel(H100, "bf16", compiled=True).layer_time_s(layer, 1, "fwd") == pytest.approx(
        GB / (3350e9 * 0.80) + GAP
    )
    cpu = device_spec("cpu")
    rms = _memory_layer("rmsnorm")
    assert ComputeModel(cpu, "fp32", compiled=True).layer_time_s(rms, 1, "fwd") == ComputeModel(
        cpu, "fp32"
    ).layer_time_s(rms, 1, "fwd")


@pytest.mark.parametrize("device", [A100, H100, device_spec("b200")], ids=lambda d: d.name)
@pytest.mark.parametrize("model", ["llama2-7b", "gpt2-small", "mixtral-8x7b"])
def test_compiled_is_never_slower_per_layer(device: object, model: str) -> None:
    workload = load_workload(model, seq_len=256)
    eager, fused = ComputeModel(device, "bf16"), ComputeModel(device, "bf16", compiled=True)  # type: ignore[arg-type]
    for phase in ("fwd", "bwd", "recompute"):
        slower = fused.layer_times_s(workload, 2, phase) > eager.layer_times_s(workload, 2, phase) * (
            1 + 1e-12
        )
        assert not slower.any()
