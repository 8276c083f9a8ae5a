"""The FFN activation's bytes as eager PyTorch's kernels move them (simcore/workload/models/transformer.py)."""

from __future__ import annotations

import pytest

from simcore.compute.roofline import ComputeModel, efficiency_curve
from simcore.hardware import device_spec
from simcore.workload.loader import load_workload

S, FFN, E = 512, 4096, 2  # gpt2-medium / bert-large at sequence 512, fp16


def _act(model: str):
    workload = load_workload(model, seq_len=S, dtype="fp16")
    return next(layer for layer in workload.layers if layer.name == "block0.mlp_act")


def test_gpt2_gelu_new_moves_18_accesses_forward_and_28_backward() -> None:
    """GPT-2's gelu_new, counted by hand from its code and autograd's formulas, per element of ffn.

    Forward: 0.5*x (r, w), pow (r, w), *0.044715 (r, w), x + . (r, r, w), *c (r, w), tanh (r, w),
    1 + . (r, w), a * v (r, r, w) = 18. Backward: g*v and g*a (3 + 3), tanh_backward (3), three scalar
    multiplies (2 + 2 + 2), pow_backward: x.pow(2) (2), *3 (2), g * (3) ; two accumulations into x's
    gradient (3 + 3); the two adds pass g through = 28."""
    forward = 2 + 2 + 2 + 3 + 2 + 2 + 2 + 3
    backward = (3 + 3) + 3 + (2 + 2 + 2) + (2 + 2 + 3) + (3 + 3)
    gelu = _act("gpt2-medium")
    assert gelu.memory_bytes == forward * E * S * FFN
    assert gelu.memory_bytes * gelu.bwd_bytes_ratio == pytest.approx(backward * E * S * FFN)


def test_gelu_new_backward_time_is_its_28_accesses_at_the_streaming_bandwidth() -> None:
    """The roofline prices the backward chain at 28 accesses over 0.8 of the A100's 2039 GB/s, plus
    its two kernel gaps: a closed form, independent of the layer's record."""
    device = device_spec("a100-sxm-80gb")
    model = ComputeModel(device, "fp16")
    curve = efficiency_curve(device)
    batch = 8
    expected = 28 * E * S * FFN * batch / (2039e9 * curve.memory_efficiency) + 2 * curve.kernel_overhead_s
    workload = load_workload("gpt2-medium", seq_len=S, dtype="fp16")
    index = next(i for i, layer in enumerate(workload.layers) if layer.name == "block0.mlp_act")
    kernel = model.layer_parts_s(workload, batch, "bwd")[0][index]
    assert kernel == pytest.approx(expected, rel=1e-9)


def test_a_fused_gelu_keeps_read_and_write() -> None:
    """BERT's GELU is torch's one erf kernel: read, write."""
    assert _act("bert-large").memory_bytes == 2 * E * S * FFN
