"""Sustained clocks under a board power limit (simcore.compute.power, data/power.yaml)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.fp8 import compute_model
from simcore.compute.power import capped_clock_ratio, check_power_limit, power_capped, power_spec
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies.base import TrainingConfig

H100 = device_spec("h100-sxm")


def test_the_default_limit_changes_nothing() -> None:
    """The plateaus are sustained rates at the default limit: no factor on top of them."""
    assert power_capped(H100, None) is H100
    assert power_capped(H100, 700).peak_flops == H100.peak_flops
    assert power_capped(H100, 700).memory_bandwidth_Bps == H100.memory_bandwidth_Bps


def test_500_w_on_an_h100_by_hand() -> None:
    """((500 - 70) / (700 - 70)) ** (1/3) for the SM clock; memory-bound kernels (300 W) are not capped."""
    capped = power_capped(H100, 500)
    expected = (430 / 630) ** (1 / 3)  # 0.8806
    assert capped.flops("bf16") == pytest.approx(989.5e12 * expected)
    assert capped.flops("fp32") == pytest.approx(67e12 * expected)
    assert capped.memory_bandwidth_Bps == H100.memory_bandwidth_Bps
    assert capped.name == "h100-sxm"


def test_500_w_puts_metas_h100_between_the_sxm_and_nvl_peaks() -> None:
    """torchtitan (footnote 2 of its H100 benchmark): at 500 W "the actual peak TFLOPs number is between
    SXM and NVL". NVL's datasheet: 1,671 TFLOP/s sparse BF16, 835.5 dense; SXM 989.5."""
    part = device_spec("h100-sxm-96gb-hbm2e")
    capped = power_capped(part, 500)
    assert 835.5e12 < capped.flops("bf16") < 989.5e12
    assert capped.flops("bf16") == pytest.approx(989.5e12 * (430 / 630) ** (1 / 3))
    assert capped.memory_bandwidth_Bps == 2.4e12  # memory-bound kernels draw under 500 W


def test_a_cap_below_the_memory_bound_draw_slows_memory_too() -> None:
    capped = power_capped(H100, 250)
    assert capped.memory_bandwidth_Bps == pytest.approx(3350e9 * (180 / 230) ** (1 / 3))
    assert capped.flops("bf16") == pytest.approx(989.5e12 * (180 / 630) ** (1 / 3))


def test_the_same_limit_gives_the_same_device() -> None:
    assert power_capped(H100, 500) == power_capped(H100, 500.0)
    assert power_capped(H100, 700) is H100


def test_a_compute_model_under_the_cap_runs_its_gemm_slower() -> None:
    plain, capped = compute_model(H100, "bf16"), compute_model(H100, "bf16", power_limit_w=500)
    assert capped.peak_flops == pytest.approx(plain.peak_flops * (430 / 630) ** (1 / 3))
    assert capped.memory_bandwidth_Bps == plain.memory_bandwidth_Bps


@pytest.mark.parametrize(
    ("device", "watts", "match"),
    [
        ("h100-sxm", 150, "outside h100-sxm's settable range 200..700 W"),
        ("h100-sxm", 800, "outside h100-sxm's settable range"),
        ("h100-pcie", 400, "200..350 W"),
        ("a100-sxm-80gb", 300, "has no power data; allowed on: h100-sxm"),
    ],
)
def test_a_limit_the_device_cannot_take_is_one_clear_error(device: str, watts: float, match: str) -> None:
    with pytest.raises(TrainsimError, match=match):
        check_power_limit(device, watts)


def test_training_config_refuses_a_non_positive_limit() -> None:
    with pytest.raises(TrainsimError, match="power_limit_w must be a positive number"):
        TrainingConfig(power_limit_w=0)


@given(st.floats(200, 700), st.floats(200, 700))
def test_a_lower_limit_is_never_faster(a: float, b: float) -> None:
    spec = power_spec("h100-sxm")
    assert spec is not None
    low, high = sorted((a, b))
    for draw in (spec.default_w, spec.memory_bound_draw_w):
        assert 0 < capped_clock_ratio(spec, low, draw) <= capped_clock_ratio(spec, high, draw) <= 1


def test_the_per_device_gradient_of_the_parameter_server_runs_under_the_cap() -> None:
    """The parameter-server and mixed-device path prices a gradient per device: capped there too."""
    from simcore.compute.rank_speed import device_gradient_time_s
    from simcore.workload.loader import load_workload

    workload = load_workload("gpt2-small", seq_len=1024, dtype="bf16")
    memo: dict[tuple[object, ...], tuple[object, float]] = {}
    plain = device_gradient_time_s("h100-sxm", workload, "bf16", 8, memo=memo)
    capped = device_gradient_time_s("h100-sxm", workload, "bf16", 8, memo=memo, power_limit_w=500)
    assert plain < capped < plain / (430 / 630) ** (1 / 3) + 1e-12 and len(memo) == 2
