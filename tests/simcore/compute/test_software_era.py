"""The convolution library's software era reaches every pricing path (TrainingConfig.software_era)."""

from __future__ import annotations

import pytest

from simcore.compute.rank_speed import device_gradient_time_s
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload

GTX = device_spec("gtx-980")


def test_a_2015_stack_computes_an_inception_gradient_slower() -> None:
    workload = load_workload("bn-inception", dtype="fp32")
    now = device_gradient_time_s("gtx-980", workload, "fp32", 8)
    old = device_gradient_time_s("gtx-980", workload, "fp32", 8, software_era="cudnn-v3")
    model = ComputeModel(GTX, "fp32", software_era="cudnn-v3")
    assert old == pytest.approx(sum(model.phase_time_s(workload, 8, p) for p in ("fwd", "bwd")))
    assert old > 1.5 * now  # its convolutions at 0.40 of peak instead of 1.00 dominate the gradient


def test_the_memo_keeps_eras_apart() -> None:
    workload = load_workload("bn-inception", dtype="fp32")
    memo: dict[tuple[object, ...], tuple[object, float]] = {}
    now = device_gradient_time_s("gtx-980", workload, "fp32", 8, memo=memo)
    old = device_gradient_time_s("gtx-980", workload, "fp32", 8, memo=memo, software_era="cudnn-v3")
    assert old != now and len(memo) == 2


def test_training_config_defaults_to_the_current_era() -> None:
    assert TrainingConfig().software_era == "current"
    with pytest.raises(TrainsimError, match="unknown software era"):
        ComputeModel(GTX, "fp32", software_era=TrainingConfig(software_era="cudnn-r9").software_era)


def test_an_older_era_is_never_faster() -> None:
    """On an A100 fp32 convolutions run in TF32 (no 2015 figure: unchanged) and a device whose own fp32
    plateau is below the era's keeps its own."""
    a100 = device_spec("a100-sxm-80gb")
    workload = load_workload("resnet50", dtype="fp32")
    for device in (a100, GTX, device_spec("v100-sxm2-16gb")):
        now = ComputeModel(device, "fp32").phase_time_s(workload, 8, "fwd")
        old = ComputeModel(device, "fp32", software_era="cudnn-v3").phase_time_s(workload, 8, "fwd")
        assert old >= now
    assert ComputeModel(a100, "fp32", software_era="cudnn-v3").curve.plateaus["conv_max_tf32"] == 0.29


@pytest.mark.parametrize("kernel", ["conv", "conv1x1"])
def test_cudnn_v3_runs_a_gtx_980_convolution_at_040_of_peak_by_hand(kernel: str) -> None:
    """Hand count, rows 127-130's device: one convolution of 1 GFLOP on a GTX 980 (4.98 TFLOP/s fp32,
    devices.yaml; half-efficiency time 10 us, the gpu default) reaches plateau x F / (F + P x 10 us):
    today's fp32 conv plateau 1.00, cuDNN v3's 0.40 (convnet-benchmarks, GoogLeNet V1 R3 on a Titan X:
    128 x 3 x 2 x 1.5e9 FLOP / 0.431 s / 6.60 TFLOP/s = 0.405), so 2.5x the arithmetic time."""
    flops, peak = 1e9, 4.98e12
    ramp = flops / (flops + peak * 10e-6)
    now = float(ComputeModel(GTX, "fp32").achieved_flops(flops, kernel)[()])
    old = float(ComputeModel(GTX, "fp32", software_era="cudnn-v3").achieved_flops(flops, kernel)[()])
    assert now == pytest.approx(peak * 1.00 * ramp, rel=1e-9)
    assert old == pytest.approx(peak * 0.40 * ramp, rel=1e-9)
