"""Eager (unfused) attention on A100 held to FlashAttention's kernel benchmarks of attention alone:
Megatron-LM's core (baddbmm with the scale as alpha, FusedScaleMaskSoftmax, bmm) in the FlashAttention
paper's appendix tables, and PyTorch's baddbmm / softmax / einsum harness of FlashAttention-2's Fig. 4
(``simcore/data/eager_attention.yaml``)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simcore.compute.eager_attention import attention_gemm_fraction
from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_spec
from simcore.workload.models.transformer import TransformerShape, build_layers
from simcore.workload.types import Layer, Workload

A100_40 = device_spec("a100-sxm-40gb")  # 1555 GB/s, 312 TFLOP/s fp16
A100_80 = device_spec("a100-sxm-80gb")


def _core(seq: int, hidden: int, heads: int, *, dropout: bool, fused: bool = True) -> Layer:
    shape = TransformerShape(
        layers=1, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=128, seq_len=seq,
        causal=False, dropout=dropout, flash_attention=False, fused_softmax=fused,
    )  # fmt: skip
    core = next(lay for lay in build_layers(shape, "fp16") if lay.name.endswith("attn_core"))
    return replace(core, block=-1)


def _seconds(model: ComputeModel, layers: tuple[Layer, ...], batch: int, phase: str) -> float:
    kernel, host = model.layer_parts_s(Workload("w", layers, (), "fp16", 1, "test"), batch, phase)
    return float(model.combine(kernel.sum(), host.sum()))


def test_megatron_core_forward_by_hand() -> None:
    """FlashAttention's Table 18 shape (batch 16, 8 heads of 64, seq 2048, fp16, no dropout) on an
    A100 40GB: Q K^T writes and P V reads the 16 x 8 x 2048^2 scores (2 passes of 2 bytes) plus Q, K,
    V read and the output written, at 0.575 of 1555 GB/s (their arithmetic, 137 GFLOP at 0.86 x 312,
    hides under it); the fused softmax reads and writes the scores at memory_efficiency 0.80."""
    model = ComputeModel(A100_40, "fp16")
    batch, s, w = 16, 2048, 512
    scores = 8 * s * s * batch
    io = 2 * 4 * s * w * batch
    gemm_s = (io + 2 * 2 * scores) / (1555e9 * 0.575)
    softmax_s = 2 * 2 * scores / (1555e9 * 0.80)
    expected = gemm_s + softmax_s + model.curve.kernel_overhead_s
    seconds = _seconds(model, (_core(s, w, 8, dropout=False),), batch, "fwd")
    assert seconds == pytest.approx(expected, rel=1e-9)
    assert seconds == pytest.approx(4.28e-3, rel=0.02)  # Table 18, Megatron, 2048


def test_megatron_core_backward_by_hand() -> None:
    """Backward, same shape: dP, dV, dQ, dK move 4 passes of the scores plus twice the forward's Q, K,
    V and output bytes at 0.468 of 1555 GB/s; the softmax's backward reads the gradient and its output
    and writes (3 passes) at 0.80; two kernel gaps."""
    model = ComputeModel(A100_40, "fp16")
    batch, s, w = 16, 2048, 512
    scores = 8 * s * s * batch
    io = 2 * 4 * s * w * batch
    gemm_s = (2 * io + 4 * 2 * scores) / (1555e9 * 0.468)
    softmax_s = 3 * 2 * scores / (1555e9 * 0.80)
    expected = gemm_s + softmax_s + 2 * model.curve.kernel_overhead_s
    seconds = _seconds(model, (_core(s, w, 8, dropout=False),), batch, "bwd")
    assert seconds == pytest.approx(expected, rel=1e-9)
    assert seconds == pytest.approx(8.86e-3, rel=0.02)  # Table 19, Megatron, 2048


# FlashAttention (arXiv 2205.14135) Tables 15-17, "Megatron", with dropout 0.1, no masking (not used
# to set the figures): seq -> (forward, backward, forward + backward) ms
MEGATRON_DROPOUT_A100_40 = {1024: (1.88, 2.94, 4.73), 2048: (6.56, 10.80, 17.41)}


def test_megatron_core_with_dropout_follows_the_benchmark() -> None:
    """Attention dropout adds 2.5 passes over the scores each way at 0.80: the tables with dropout,
    which did not set the figures, within 15% per pass and 5% at seq 2048."""
    model = ComputeModel(A100_40, "fp16")
    for seq, (fwd_ms, bwd_ms, both_ms) in MEGATRON_DROPOUT_A100_40.items():
        core = (_core(seq, 512, 8, dropout=True),)
        fwd, bwd = (_seconds(model, core, 16, phase) * 1e3 for phase in ("fwd", "bwd"))
        tolerance = 0.05 if seq == 2048 else 0.15
        assert fwd == pytest.approx(fwd_ms, rel=tolerance)
        assert bwd == pytest.approx(bwd_ms, rel=tolerance)
        assert fwd + bwd == pytest.approx(both_ms, rel=tolerance)


# FlashAttention-2 (arXiv 2307.08691) Fig. 4 (a)-(b), A100 80GB, "Pytorch" (baddbmm with alpha,
# softmax, einsum; no dropout, non-causal), batch x seq = 16k, 2048 features: head dim -> seq -> TFLOP/s
PYTORCH_FA2_A100_80 = {
    64: {512: 36, 1024: 40, 2048: 43, 4096: 45, 8192: 46},
    128: {512: 53, 1024: 67, 2048: 76, 4096: 79, 8192: 86},
}


def test_pytorch_harness_follows_flash_attention_2_bars() -> None:
    """The harness's kernels: the fused-softmax core (scale in baddbmm's alpha, one softmax) plus
    einsum's layout copies of Q, K, V (and of their gradients and the output's in backward): every
    point within 25%, the mean log error within 12% (the 0.80 of before: +42% to +57%)."""
    model = ComputeModel(A100_80, "fp16")
    errors = []
    for head_dim, rows in PYTORCH_FA2_A100_80.items():
        for seq, measured in rows.items():
            w, batch = 2048, 16384 // seq
            copies = Layer(
                "copies", "elementwise", -1, 0, 0.0, 0.0, 0.0, 0.0, 12.0 * seq * w, bwd_bytes_ratio=4 / 3
            )
            layers = (_core(seq, w, w // head_dim, dropout=False), copies)
            seconds = sum(_seconds(model, layers, batch, phase) for phase in ("fwd", "bwd"))
            rate = 3.5 * 4 * seq * seq * w * batch / seconds / 1e12
            errors.append(math.log(rate / measured))
            assert abs(rate / measured - 1) < 0.25, (head_dim, seq, rate, measured)
    assert abs(sum(errors) / len(errors)) < 0.12


def test_devices_without_a_benchmark_keep_the_streaming_bandwidth() -> None:
    assert attention_gemm_fraction(A100_40) == (0.575, 0.468)
    assert attention_gemm_fraction(device_spec("a100-pcie-80gb")) == (0.575, 0.468)
    assert attention_gemm_fraction(device_spec("h100-sxm")) is None
