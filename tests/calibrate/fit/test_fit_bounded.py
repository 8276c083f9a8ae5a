"""The protocol search of calibrate.fit is bounded: linear in rows, same fits as all cut pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from calibrate.fit import cli as fit
from calibrate.fit.cli import MAX_CUTS, _cut_candidates, _splits, fit_protocols


def test_cuts_fall_only_between_different_sizes() -> None:
    x = np.array([8.0, 8, 16, 16, 32, 32, 64, 64])
    assert _cut_candidates(x) == [2, 4, 6]  # never between the repeats of one size


def test_cuts_are_thinned_to_a_log_grid_over_many_sizes() -> None:
    x = np.arange(1.0, 10_001.0)
    cuts = _cut_candidates(x)
    assert len(cuts) <= MAX_CUTS and cuts == sorted(set(cuts))
    assert cuts[0] == 2 and cuts[-1] == len(x) - 2  # the grid spans the whole sweep
    gaps = np.diff(np.log(x[cuts]))
    assert gaps.max() < 3 * gaps[gaps > 0].mean()  # spread over log size, not bunched


def test_splits_match_every_pair_when_every_boundary_is_a_candidate() -> None:
    n = 12
    cuts = list(range(2, n - 1))
    every = [(i, j) for i in range(2, n - 3) for j in range(i + 2, n - 1)]
    assert list(_splits(cuts, n, 3)) == every
    assert list(_splits(cuts, n, 2)) == [(i,) for i in range(2, n - 1)]
    assert list(_splits(cuts, n, 1)) == [()]


def _sweep(repeats: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array([2.0**k for k in range(3, 31)])  # 8 B .. 1 GiB, nccl-tests -f 2
    times = np.minimum(5e-6 + sizes / 5e9, np.minimum(12e-6 + sizes / 40e9, 30e-6 + sizes / 90e9))
    return np.repeat(sizes, repeats), np.repeat(times, repeats)


def test_repeated_rows_give_the_fits_of_one_row_per_size() -> None:
    one, _ = fit_protocols(*_sweep(1))
    many, _ = fit_protocols(*_sweep(40))  # 1,120 rows: all cut pairs would be ~600,000 splits
    assert one.keys() == many.keys() and len(one) >= 2
    for name in one:
        assert np.isclose(one[name].busbw_Bps, many[name].busbw_Bps, rtol=1e-6)


def test_the_search_tries_at_most_max_cuts_squared_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[int] = []
    real = fit._segment_fit

    def counted(x: np.ndarray, t: np.ndarray) -> tuple[float, float, float] | None:
        tried.append(len(x))
        return real(x, t)

    monkeypatch.setattr(fit, "_segment_fit", counted)
    fit_protocols(np.arange(1.0, 5001.0) * 64, np.arange(1.0, 5001.0) * 1e-6 + 1e-5)
    runs = 1 + MAX_CUTS + MAX_CUTS * MAX_CUTS
    assert len(tried) <= 3 * runs, len(tried)
    assert len(tried) < sum(1 for _ in itertools.combinations(range(5000), 2))
