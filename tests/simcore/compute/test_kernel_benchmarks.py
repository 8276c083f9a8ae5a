"""The compute model held to kernel-level measurements, not whole training steps: the GEMM size curve
to OpenXLA's per-shape cuBLAS table for H100 (``efficiency.yaml`` source ``xla_gemm``), eager
(unfused) attention to the FlashAttention-3 paper's "standard attention" bars on H100."""

from __future__ import annotations

import math

import pytest

from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_spec
from simcore.workload.models.transformer import TransformerShape, build_layers
from simcore.workload.types import Layer, Workload

H100 = device_spec("h100-sxm")

# (m, n, k, measured bf16 TFLOP/s): unbatched entries of kDefaultMatmulPTable["sm_90"],
# third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, tensorflow 372d578b
XLA_SM90 = (
    (4096, 4096, 4096, 783.3),
    (2048, 4096, 4096, 753.6),
    (1024, 4096, 4096, 738.5),
    (4096, 4096, 1024, 677.4),
    (2048, 4096, 2048, 715.4),
    (2048, 2048, 2048, 632.0),
    (1024, 2048, 2048, 524.3),
    (2048, 1024, 4096, 653.1),
    (4096, 512, 1024, 370.8),
    (1024, 1024, 1024, 236.3),
    (4096, 4096, 256, 392.2),
    (512, 4096, 1024, 373.3),
)


def _gemm(m: int, n: int, k: int) -> Layer:
    flops = 2.0 * m * n * k
    return Layer(
        "mm",
        "linear",
        -1,
        k * n,
        flops,
        2 * flops,
        0.0,
        2.0 * m * n,
        2.0 * (m * k + k * n + m * n),
        (m, k, n),
    )


def _device_s(model: ComputeModel, layer: Layer) -> float:
    """The kernel's own time (what a profiler times), without the gap between kernels."""
    kernel, _ = model.layer_parts_s(Workload("w", (layer,), (), "bf16", 0, "test"), 1, "fwd")
    return float(kernel[0]) - model.curve.kernel_overhead_s


def test_hopper_1024_cubed_by_hand() -> None:
    """1024^3 bf16 on H100 SXM: the size curve 0.80 F / (F + P * 5 us), then 64 tiles of 128 x 128
    split in two along k (132 SMs hold two per tile; 1024 / 512 = 2 splits) fill 128 of 132 SMs in
    one wave: the arithmetic at the plateau rate stretched by 132 / 128."""
    model = ComputeModel(H100, "bf16")
    flops = 2.0 * 1024**3
    peak = 989.5e12
    curve_s = flops / (peak * 0.80 * flops / (flops + peak * 5e-6))
    wave = 128 / 132
    expected = curve_s + flops / (peak * 0.80) * (1 / wave - 1)
    assert _device_s(model, _gemm(1024, 1024, 1024)) == pytest.approx(expected, rel=1e-9)


def test_hopper_gemm_rates_follow_xlas_measured_table() -> None:
    """Every shape within 30% of its measured rate, the mean log error within 10%: the 15 us
    half-efficiency time used before priced 1024^3 at 67 TFLOP/s (measured 236)."""
    model = ComputeModel(H100, "bf16")
    errors = []
    for m, n, k, measured in XLA_SM90:
        layer = _gemm(m, n, k)
        rate = layer.fwd_flops / _device_s(model, layer) / 1e12
        errors.append(math.log(rate / measured))
        assert abs(rate / measured - 1) < 0.30, (m, n, k, rate, measured)
    assert abs(sum(errors) / len(errors)) < 0.10


# J. Shah et al., "FlashAttention-3" (2024), Figs. 5 and 6 (H100 80GB SXM5, head dim 128, non-causal,
# batch x seq = 16k tokens, 2,048 features): "Standard attention" (PyTorch matmul, softmax, matmul)
# forward and backward TFLOP/s by sequence length (backward counted as 2.5x the forward's FLOPs)
STANDARD_ATTENTION_H100 = {
    512: (74, 104),
    1024: (100, 131),
    2048: (119, 159),
    4096: (133, 174),
    8192: (139, 181),
}


def test_eager_attention_follows_the_standard_attention_benchmark() -> None:
    """The bytes the eager attention layer moves (scores written, scaled, softmaxed, read) and its
    batched GEMMs, priced by the roofline: every point within 30%, the mean log error within 10%."""
    model = ComputeModel(H100, "fp16")
    errors = []
    for seq, (fwd_tflops, bwd_tflops) in STANDARD_ATTENTION_H100.items():
        shape = TransformerShape(
            layers=1, hidden=2048, heads=16, ffn=8192, vocab=128, seq_len=seq,
            causal=False, dropout=False, flash_attention=False,
        )  # fmt: skip
        core = next(lay for lay in build_layers(shape, "fp16") if lay.name.endswith("attn_core"))
        batch = 16384 // seq
        flops = 4.0 * seq * seq * 2048 * batch
        for phase, measured, work in (("fwd", fwd_tflops, flops), ("bwd", bwd_tflops, 2.5 * flops)):
            rate = work / model.layer_time_s(core, batch, phase) / 1e12
            errors.append(math.log(rate / measured))
            assert abs(rate / measured - 1) < 0.30, (seq, phase, rate, measured)
    assert abs(sum(errors) / len(errors)) < 0.10


def test_ga102_fp32_sgemm_plateau_by_hand() -> None:
    """FP32 (TF32 off) 10240^3 on an A10G: CUDA-core SGEMM at 0.70 of the 35 TFLOP/s boost-clock peak
    (efficiency.yaml source ga10x_sgemm: RTX 3090 / 3080 Ti torch.mm, 0.69-0.71) on the size curve
    with the gpu default 10 us; 80 x 80 tiles fill the 80 SMs in whole waves."""
    model = ComputeModel(device_spec("a10g"), "fp32")
    n = 10240
    flops = 2.0 * n**3
    peak = 35e12
    expected = flops / (peak * 0.70 * flops / (flops + peak * 10e-6))
    seconds = _device_s(model, _gemm(n, n, n))  # its bytes (1.3 ms at 600 GB/s) hide under 88 ms
    assert seconds == pytest.approx(expected, rel=1e-9)
    assert flops / seconds / 1e12 == pytest.approx(24.5, abs=0.05)
