"""The A100 GEMM plateau against cuBLAS of 2020-21 (efficiency.yaml ``sources.cublas11_a100``).

Issue 21 asked whether the 2021 Selene runs need a GEMM software era below today's plateau. The
kernel-level figures of CUDA 11.0-11.3 bracket the plateau instead, so none is modelled; these tests
hold the shipped curve inside that band, under every software era.
"""

from __future__ import annotations

import pytest

from simcore.compute.roofline import ComputeModel, software_eras
from simcore.hardware import device_spec

A100 = device_spec("a100-sxm-80gb")
PEAK = 312e12  # devices.yaml, A100 SXM fp16/bf16 tensor-core peak

# CUTLASS 2.2 (CUDA 11.0) profiler.md: the s16816 fp16 GEMM m=3456 n=4096 k=8192 on A100, and its
# README plot: CUTLASS's A100 TensorOp (f32) bars at ~90% of cuBLAS 11.0
CUTLASS_FLOPS = 231956545536
CUTLASS_S = 0.98647e-3
CUTLASS_SHARE_OF_CUBLAS = 0.90
# NVIDIA/cutlass discussion #241: cuBLAS (CUDA 11.0 and 11.3), A100 SXM4, fp16 8192^3 in 3.71 ms
SQUARE_FLOPS = 2 * 8192**3
SQUARE_S = 3.71e-3


def _cublas_2021_band() -> tuple[float, float]:
    """cuBLAS 11.0's achieved FLOP/s on the two large A100 GEMMs of the source, by hand."""
    low = CUTLASS_FLOPS / CUTLASS_S / CUTLASS_SHARE_OF_CUBLAS
    high = SQUARE_FLOPS / SQUARE_S
    return low, high


def test_the_2021_band_by_hand() -> None:
    low, high = _cublas_2021_band()
    assert low == pytest.approx(261.3e12, rel=1e-3)  # 235.1 TFLOP/s / 0.90
    assert high == pytest.approx(296.4e12, rel=1e-3)
    assert 0.83 < low / PEAK < 0.84 and 0.94 < high / PEAK < 0.96


@pytest.mark.parametrize("era", software_eras())
def test_no_era_moves_the_a100_gemm_plateau_out_of_the_2021_band(era: str) -> None:
    low, high = _cublas_2021_band()
    plateau = ComputeModel(A100, "fp16", software_era=era).curve.plateau("gemm", "fwd", "fp16")
    assert plateau == 0.86  # the mamf source's A100 SXM figure; no GEMM era lowers it
    assert low / PEAK <= plateau <= high / PEAK


def test_the_cutlass_shape_prices_inside_the_2021_band() -> None:
    """Hand count: 231.96 GFLOP at plateau 0.86 of 312 TFLOP/s on the size ramp F / (F + P x 10 us)
    (the gpu default half-efficiency time) = 268.32 x 0.98673 = 264.8 TFLOP/s, between cuBLAS 11.0's
    261 and 296 on the source's two shapes."""
    ramp = CUTLASS_FLOPS / (CUTLASS_FLOPS + PEAK * 10e-6)
    priced = float(ComputeModel(A100, "fp16").achieved_flops(CUTLASS_FLOPS, "gemm")[()])
    assert priced == pytest.approx(PEAK * 0.86 * ramp, rel=1e-9)
    assert priced == pytest.approx(264.8e12, rel=1e-3)
    low, high = _cublas_2021_band()
    assert low <= priced <= high
