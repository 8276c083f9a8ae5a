"""CPU ranks sharing cores: time slicing, the Poisson-binomial count of busy threads, the fixed point."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.core_sharing import (
    busy_count_distribution,
    expected_sharing_slowdown,
    shared_core_fixed_point,
    time_sliced_slowdown,
)
from simcore.errors import TrainsimError

fractions = st.lists(st.floats(0.0, 1.0), min_size=0, max_size=8)
cores = st.integers(1, 8)


@given(fractions)
def test_busy_count_is_a_distribution_with_the_fractions_as_mean(ps):
    distribution = busy_count_distribution(ps)
    assert len(distribution) == len(ps) + 1
    assert distribution.min() >= -1e-12
    assert math.isclose(distribution.sum(), 1.0, rel_tol=1e-9)
    assert math.isclose(float(np.dot(np.arange(len(distribution)), distribution)), sum(ps), abs_tol=1e-9)


@given(fractions, cores, st.floats(0.0, 4.0))
def test_sharing_lies_between_alone_and_everyone_busy(ps, c, background):
    slowdown = expected_sharing_slowdown(ps, c, background)
    assert max(1.0, (1 + background) / c) - 1e-9 <= slowdown
    assert slowdown <= time_sliced_slowdown(1 + len(ps) + background, c) + 1e-9


@given(fractions, cores, st.integers(0, 7), st.floats(0.0, 1.0))
def test_a_busier_neighbour_never_speeds_a_thread_up(ps, c, index, more):
    if not ps:
        return
    i = index % len(ps)
    busier = [*ps[:i], max(ps[i], more), *ps[i + 1 :]]
    assert expected_sharing_slowdown(busier, c) >= expected_sharing_slowdown(ps, c) - 1e-12


def test_threads_always_busy_together_are_time_sliced():
    assert expected_sharing_slowdown([1.0, 1.0], 2) == pytest.approx(1.5)
    assert expected_sharing_slowdown([1.0, 1.0, 1.0], 2) == pytest.approx(2.0)
    assert expected_sharing_slowdown([0.0, 0.0, 0.0], 2) == 1.0
    # two others each busy half the time on two cores: both busy a quarter of the time (3 on 2)
    assert expected_sharing_slowdown([0.5, 0.5], 2) == pytest.approx(0.75 + 0.25 * 1.5)


def test_fixed_point_matches_its_own_busy_fractions():
    compute, wait = 0.3, 0.07  # seconds of compute per cycle at full speed, seconds waiting

    def busy(slowdowns):
        return [compute * s / (compute * s + wait) for s in slowdowns]

    solved = shared_core_fixed_point(busy, 3, 2)
    fractions = busy(solved)
    for i, s in enumerate(solved):
        assert s == pytest.approx(expected_sharing_slowdown(fractions[:i] + fractions[i + 1 :], 2), abs=1e-3)
    assert 1.0 < solved[0] < 1.5  # less than every worker busy at once, more than alone


def test_fixed_point_counts_further_threads_as_others_only():
    solved = shared_core_fixed_point(lambda s: [1.0, 1.0], 1, 1)
    assert solved == pytest.approx((2.0,), abs=1e-3)


@pytest.mark.parametrize(
    "call",
    [
        lambda: time_sliced_slowdown(0.5, 2),
        lambda: time_sliced_slowdown(2, 0),
        lambda: busy_count_distribution([1.5]),
        lambda: expected_sharing_slowdown([0.5], 0),
        lambda: shared_core_fixed_point(lambda s: [], 2, 2),
    ],
)
def test_bad_input_is_one_clear_error(call):
    with pytest.raises(TrainsimError):
        call()
