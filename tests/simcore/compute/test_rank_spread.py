"""The slowest of N ranks gates a synchronous step (simcore.compute.rank_spread, data/rank_spread.yaml)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.fp8 import compute_model
from simcore.compute.rank_spread import (
    expected_max_standard_normal,
    rank_spread_sigma,
    slowest_of,
    slowest_rank_time_factor,
    spread_ranks,
)
from simcore.hardware import device_spec

H100 = device_spec("h100-sxm")


@pytest.mark.parametrize(
    ("n", "closed_form"),
    [
        (1, 0.0),
        (2, 1 / math.sqrt(math.pi)),  # E[max(Z1, Z2)]
        (3, 3 / (2 * math.sqrt(math.pi))),
        # n = 4 and 5: the tabulated normal order statistics (Harter 1961): 1.02938, 1.16296
        (4, 1.02938),
        (5, 1.16296),
    ],
)
def test_expected_maximum_of_normals_matches_its_closed_form(n: int, closed_form: float) -> None:
    assert expected_max_standard_normal(n) == pytest.approx(closed_form, abs=1e-5)


def test_sigma_is_the_papers_8_percent_whisker_spread() -> None:
    """8% between the box plot's whiskers = 2 x 2.698 sigma of a normal spread."""
    assert rank_spread_sigma() == pytest.approx(0.08 / (2 * 2.698), abs=1e-4)


def test_eight_ranks_by_hand() -> None:
    """1 / (1 - 0.0148 x 1.42360): 2.15% longer compute on 8 GPUs, nothing on 1."""
    assert slowest_rank_time_factor(1) == 1.0
    assert slowest_rank_time_factor(8) == pytest.approx(1 / (1 - 0.0148 * 1.42360), rel=1e-5)
    slow = slowest_of(H100, 8)
    assert slow.flops("bf16") == pytest.approx(989.5e12 * (1 - 0.0148 * 1.42360), rel=1e-5)
    assert slow.memory_bandwidth_Bps == H100.memory_bandwidth_Bps  # the clock's spread, not HBM's
    assert slowest_of(H100, 1) is H100 and slowest_of(H100, 8) == slow


def test_off_where_explicit_speeds_are_simulated() -> None:
    assert spread_ranks(True, 64, explicit_speeds=False) == 64
    assert spread_ranks(True, 64, explicit_speeds=True) == 1
    assert spread_ranks(False, 64, explicit_speeds=False) == 1
    plain, spread = compute_model(H100, "bf16"), compute_model(H100, "bf16", ranks=128)
    assert spread.peak_flops == pytest.approx(plain.peak_flops / slowest_rank_time_factor(128))


def test_a_cpu_rank_has_no_spread() -> None:
    cpu = device_spec("cpu")
    assert slowest_of(cpu, 16) is cpu


@settings(max_examples=25)
@given(st.integers(1, 4096), st.integers(1, 4096))
def test_more_ranks_are_never_faster(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert 1.0 <= slowest_rank_time_factor(low) <= slowest_rank_time_factor(high) < 1.1
