"""Staleness distributions: validation, quantiles, seeded sampling, loading, and the penalty estimate."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.staleness_accuracy.predicted import (
    PREDICTION_STEPS,
    _simulate,
    predicted_parameter_server,
    predicted_staleness,
    predicted_update_time_s,
    prediction_steps,
)
from simcore.errors import TrainsimError
from simcore.paramserver import DEFAULT_STALENESS_BOUND
from simcore.staleness.distribution import (
    StalenessDistribution,
    fixed_staleness,
    load_measured_staleness,
    normalize_ps_mode,
    staleness_from_histogram,
    staleness_from_samples,
)
from simcore.staleness.penalty import (
    PenaltyObservation,
    estimate_accuracy_penalty,
    fit_penalty_model,
    load_penalty_coefficients,
)
from tests.paths import REPO

histograms = st.dictionaries(st.integers(0, 60), st.integers(1, 1000), min_size=1, max_size=12)


@given(histograms)
def test_histogram_is_a_distribution_over_its_delays(counts: dict[int, int]) -> None:
    """Probabilities sum to 1; mean lies between the smallest and largest delay; p50 <= p99 <= max."""
    dist = staleness_from_histogram(counts, "h")
    assert math.isclose(sum(dist.probabilities), 1.0)
    assert min(counts) <= dist.mean <= max(counts)
    assert min(counts) <= dist.p50 <= dist.p99 <= dist.max_delay == max(counts)
    assert math.isclose(dist.mean, sum(d * c for d, c in counts.items()) / sum(counts.values()))


@given(st.lists(st.integers(0, 40), min_size=1, max_size=300))
def test_samples_give_their_empirical_mean_and_quantiles(samples: list[int]) -> None:
    """from_samples keeps the sample mean, and p99 is the inverted-CDF 99th percentile of the samples."""
    dist = staleness_from_samples(samples, "s")
    assert math.isclose(dist.mean, float(np.mean(samples)), rel_tol=1e-12, abs_tol=1e-12)
    assert dist.p99 == int(np.quantile(samples, 0.99, method="inverted_cdf"))
    assert dist.p50 == int(np.quantile(samples, 0.5, method="inverted_cdf"))


@settings(max_examples=30)
@given(histograms, st.integers(0, 2**32 - 1))
def test_sampling_is_reproducible_and_stays_in_the_support(counts: dict[int, int], seed: int) -> None:
    dist = staleness_from_histogram(counts, "h")
    first = dist.sample(np.random.default_rng(seed), 200)
    second = dist.sample(np.random.default_rng(seed), 200)
    assert np.array_equal(first, second)
    assert set(first.tolist()) <= set(dist.delays)


def test_sampling_follows_the_probabilities() -> None:
    """With many draws the empirical frequencies approach the distribution (a loose, seeded check)."""
    dist = staleness_from_histogram({0: 1, 3: 2, 7: 1}, "h")
    draws = dist.sample(np.random.default_rng(1), 40_000)
    frequencies = [float(np.mean(draws == d)) for d in (0, 3, 7)]
    assert frequencies == pytest.approx([0.25, 0.5, 0.25], abs=0.01)


def test_fixed_delay_has_no_spread() -> None:
    dist = fixed_staleness(4)
    assert (dist.mean, dist.p50, dist.p99, dist.max_delay) == (4.0, 4, 4, 4)
    assert dist.sample(np.random.default_rng(0), 5).tolist() == [4] * 5


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, float("nan")])
def test_bad_delays_are_rejected(bad: object) -> None:
    with pytest.raises(TrainsimError, match="non-negative integer"):
        fixed_staleness(bad)  # type: ignore[arg-type]


def test_invalid_distributions_are_rejected() -> None:
    with pytest.raises(TrainsimError, match="sum to 1"):
        StalenessDistribution((0, 1), (0.5, 0.4), "x", "test")
    with pytest.raises(TrainsimError, match="increasing order"):
        StalenessDistribution((2, 1), (0.5, 0.5), "x", "test")
    with pytest.raises(TrainsimError, match="no observations"):
        staleness_from_histogram({1: 0}, "x")
    with pytest.raises(TrainsimError, match="no staleness samples"):
        staleness_from_samples([], "x")


def test_modes_accept_the_ps_prefix_and_reject_unknown_ones() -> None:
    assert normalize_ps_mode("ps-SSP") == "ssp"
    assert normalize_ps_mode("mitigated") == "mitigated"
    with pytest.raises(TrainsimError, match="allowed: sync, async, ssp, mitigated"):
        normalize_ps_mode("hogwild")


def test_measured_jsonl_uses_step_records_only(tmp_path) -> None:
    """calibrate.train JSONL: 'staleness' lists of step records; other kinds and a torn last line are ignored."""
    path = tmp_path / "ps_async.jsonl"
    lines = [
        {"kind": "meta", "staleness": [99]},
        {"kind": "step", "step": 0, "staleness": [0, 1]},
        {"kind": "step", "step": 1, "staleness": [1, 3]},
        {"kind": "step", "step": 2},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"kind": "step", "stal', encoding="utf-8")
    dist = load_measured_staleness(path)
    assert dist.delays == (0, 1, 3)
    assert dist.mean == pytest.approx(1.25)
    assert dist.source == "measured: ps_async.jsonl"


def test_measured_jsonl_prefers_server_records_and_skips_the_sentinel(tmp_path) -> None:
    """calibrate.train logs each update twice (worker and server view); -1 marks 'no update applied'."""
    path = tmp_path / "train.jsonl"
    lines = [
        {"kind": "provenance", "role": "worker"},
        {"kind": "step", "role": "worker", "rank": 1, "staleness": [-1]},
        {"kind": "step", "role": "worker", "rank": 1, "staleness": [2]},
        {"kind": "step", "role": "server", "rank": 0, "staleness": [0, 2, 4]},
        {"kind": "summary", "role": "server", "staleness_mean": 2.0},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    assert load_measured_staleness(path).delays == (0, 2, 4)
    workers_only = tmp_path / "workers.jsonl"
    workers_only.write_text("\n".join(json.dumps(x) for x in lines[:3]) + "\n", encoding="utf-8")
    assert load_measured_staleness(workers_only).delays == (2,)


def test_measured_plain_list_and_histogram(tmp_path) -> None:
    listed = tmp_path / "s.json"
    listed.write_text("[0, 2, 2, 4]", encoding="utf-8")
    assert load_measured_staleness(listed).mean == 2.0
    hist = tmp_path / "h.json"
    hist.write_text('{"histogram": {"0": 3, "5": 1}}', encoding="utf-8")
    assert load_measured_staleness(hist).mean == 1.25


def test_measured_file_errors_name_the_problem(tmp_path) -> None:
    with pytest.raises(TrainsimError, match="not found"):
        load_measured_staleness(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"kind": "meta"}\n', encoding="utf-8")
    with pytest.raises(TrainsimError, match="no staleness found"):
        load_measured_staleness(empty)
    negative = tmp_path / "neg.json"
    negative.write_text("[1, -2]", encoding="utf-8")
    with pytest.raises(TrainsimError, match="non-negative integer"):
        load_measured_staleness(negative)


MIXED_CLUSTER = str(REPO / "topologies" / "examples" / "mixed-dgx-g5.yaml")


def test_predicted_distributions_are_reproducible_by_seed() -> None:
    """Same cluster, mode, bound, GPUs and seed: the same distribution and time, also from a fresh simulation."""
    first = predicted_parameter_server("g5.12xlarge", "ps-async", None, 4, 7)
    _simulate.cache_clear()
    again = predicted_parameter_server("g5.12xlarge", "async", None, 4, 7)
    assert again is not first  # really simulated twice
    assert (again.distribution, again.update_time_s) == (first.distribution, first.update_time_s)
    assert predicted_staleness("g5.12xlarge", "async", None, 4, 7) == first.distribution
    assert predicted_update_time_s("g5.12xlarge", "async", None, 4, 7) == first.update_time_s


def test_one_simulation_serves_staleness_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation runs once per (cluster, mode, bound, GPUs, seed); sync and async ignore the bound."""
    import simcore.paramserver as paramserver

    calls: list[tuple[str, int]] = []
    real = paramserver.run_parameter_server

    def counting(workload: Any, cluster: str, workers: int, ps: Any, training: Any, **kwargs: Any) -> Any:
        calls.append((ps.mode, ps.staleness_bound))
        return real(workload, cluster, workers, ps, training, **kwargs)

    monkeypatch.setattr(paramserver, "run_parameter_server", counting)
    _simulate.cache_clear()
    predicted_staleness("g5.12xlarge", "async", None, 2, 0)
    predicted_update_time_s("g5.12xlarge", "async", 5, 2, 0)
    predicted_staleness("g5.12xlarge", "ssp", 1, 2, 0)
    predicted_update_time_s("g5.12xlarge", "ssp", 1, 2, 0)
    predicted_update_time_s("g5.12xlarge", "ssp", 2, 2, 0)
    assert calls == [("ps-async", DEFAULT_STALENESS_BOUND), ("ps-ssp", 1), ("ps-ssp", 2)]
    _simulate.cache_clear()


def test_sync_time_per_update_counts_each_gradient_of_a_round() -> None:
    """The trainer applies one minibatch gradient per update, so a ps-sync round of W gradients is W updates."""
    sync = predicted_parameter_server("dgx-a100", "sync", None, 4, 0)
    assert sync.distribution.max_delay == 0
    assert sync.gradients_applied == 4 * prediction_steps(4) == 4 * PREDICTION_STEPS
    # step_time_s is the p50 round, update_time_s the run's mean: the first round starts without
    # waiting for pulls (layer-wise pipelining), so the two differ by well under 1%
    assert sync.update_time_s == pytest.approx(sync.step_time_s / 4, rel=1e-2)


@pytest.mark.parametrize("bound", [0, 1])
def test_ssp_staleness_is_clock_bounded(bound: int) -> None:
    """SSP bounds clock lag by s, so staleness in server versions is at most (W - 1)(2s + 1)
    (simcore.paramserver.modes); on uneven GPUs the gate bites and SSP is less stale than async."""
    workers = 12  # 8 A100 and 4 A10G: the A100 workers run ahead
    ssp = predicted_staleness(MIXED_CLUSTER, "ssp", bound, workers, 0)
    unbounded = predicted_staleness(MIXED_CLUSTER, "async", None, workers, 0)
    assert ssp.max_delay <= (workers - 1) * (2 * bound + 1)
    assert ssp.max_delay < unbounded.max_delay
    assert ssp.mean < unbounded.mean


def test_async_on_more_gpus_is_more_stale() -> None:
    """An asynchronous server with W equal workers gives staleness of about W - 1."""
    means = [predicted_staleness("dgx-a100", "async", None, gpus, 0).mean for gpus in (1, 2, 4, 8)]
    assert means[0] == 0.0
    assert means == sorted(means) and len(set(means)) == len(means)
    assert predicted_staleness("dgx-a100", "async", None, 8, 0).p50 == 7


def test_prediction_steps_keep_large_clusters_affordable() -> None:
    assert [prediction_steps(g) for g in (1, 8, 16, 32, 64, 512)] == [32, 32, 32, 16, 8, 8]


def test_prediction_rejects_bad_input() -> None:
    with pytest.raises(TrainsimError, match="unknown parameter-server mode"):
        predicted_staleness("dgx-a100", "bogus", None, 8, 0)
    with pytest.raises(TrainsimError, match="GPUs must be a whole number >= 1"):
        predicted_update_time_s("dgx-a100", "async", None, 0, 0)
    with pytest.raises(TrainsimError):
        predicted_staleness("no-such-cluster", "async", None, 8, 0)


def test_shipped_penalty_coefficients_have_provenance() -> None:
    data = load_penalty_coefficients()
    assert {"command", "date", "machine"} <= set(data["provenance"])
    assert data["provenance"]["command"].startswith("python -m experiments.staleness_accuracy")
    assert set(data["fits"]) == {"async", "mitigated"}


def test_penalty_estimate_is_zero_without_staleness() -> None:
    for mitigated in (False, True):
        estimate = estimate_accuracy_penalty(0.0, 0.0, mitigated=mitigated)
        assert estimate["penalty_points"] == 0.0
        assert estimate["updates_to_target_factor"] == 1.0
        assert not estimate["extrapolated"]


@given(st.floats(0, 30), st.floats(0, 30), st.floats(0, 30), st.booleans())
def test_penalty_estimate_never_decreases_with_staleness(
    mean: float, p99: float, extra: float, mitigated: bool
) -> None:
    """More staleness (mean and p99 both no smaller) never gives a smaller estimated penalty."""
    low = estimate_accuracy_penalty(mean, max(mean, p99), mitigated=mitigated)
    high = estimate_accuracy_penalty(mean + extra, max(mean, p99) + extra, mitigated=mitigated)
    assert high["penalty_points"] >= low["penalty_points"] >= 0.0


def test_penalty_estimate_follows_a_custom_coefficients_file(tmp_path) -> None:
    """x = alpha*mean + (1-alpha)*p99; penalty interpolates the knots; a null factor means never reached."""
    path = tmp_path / "coeffs.json"
    knots = [
        {"staleness": 0, "penalty_points": 0.0, "updates_to_target_factor": 1.0},
        {"staleness": 4, "penalty_points": 2.0, "updates_to_target_factor": 2.0},
        {"staleness": 8, "penalty_points": 10.0, "updates_to_target_factor": None},
    ]
    fit = {"alpha_mean": 0.5, "knots": knots}
    path.write_text(json.dumps({"fits": {"async": fit, "mitigated": fit}}), encoding="utf-8")
    estimate = estimate_accuracy_penalty(2.0, 4.0, coefficients_path=path)
    assert estimate["effective_staleness"] == 3.0
    assert estimate["penalty_points"] == pytest.approx(1.5)
    assert estimate["updates_to_target_factor"] == pytest.approx(1.75)
    assert estimate_accuracy_penalty(6.0, 6.0, coefficients_path=path)["updates_to_target_factor"] is None
    beyond = estimate_accuracy_penalty(20.0, 20.0, coefficients_path=path)
    assert beyond["extrapolated"] and beyond["penalty_points"] == 10.0


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_penalty_estimate_rejects_bad_staleness(bad: float) -> None:
    with pytest.raises(TrainsimError, match="mean_staleness"):
        estimate_accuracy_penalty(bad, 1.0)


@given(st.integers(0, 100))
def test_fit_recovers_how_mean_and_p99_combine(alpha_percent: int) -> None:
    """Spread settings generated as penalty(alpha*mean + (1-alpha)*p99) on a known curve give back alpha."""
    alpha = alpha_percent / 100
    curve = {d: float(d * d) for d in range(1, 17)}
    fixed = [PenaltyObservation(f"d={d}", d, d, p, 1.0 + d, fixed=True) for d, p in curve.items()]
    spread = [
        PenaltyObservation(
            f"{m},{q}",
            m,
            q,
            float(np.interp(alpha * m + (1 - alpha) * q, [0, *curve], [0, *curve.values()])),
            None,
            fixed=False,
        )
        for m, q in ((0.5, 8), (1.0, 16), (3.0, 6), (6.0, 16), (2.0, 12))
    ]
    fit = fit_penalty_model(fixed + spread)
    assert fit["alpha_mean"] == pytest.approx(alpha, abs=0.011)
    assert fit["rmse_points_spread"] < 0.5


def test_fit_knots_are_monotone_and_stop_where_the_target_was_missed() -> None:
    observations = [
        PenaltyObservation("d=1", 1, 1, -0.3, 1.2, fixed=True),  # noise: better than sync
        PenaltyObservation("d=2", 2, 2, 2.0, 1.1, fixed=True),
        PenaltyObservation("d=4", 4, 4, 1.0, None, fixed=True),
        PenaltyObservation("d=8", 8, 8, 9.0, 3.0, fixed=True),
        PenaltyObservation("spread", 1, 4, 0.5, None, fixed=False),
    ]
    knots = fit_penalty_model(observations)["knots"]
    assert [k["penalty_points"] for k in knots] == [0.0, 0.0, 2.0, 2.0, 9.0]
    assert [k["updates_to_target_factor"] for k in knots] == [1.0, 1.2, 1.2, None, None]
    with pytest.raises(TrainsimError, match="needs fixed-delay and spread"):
        fit_penalty_model(observations[:4])
