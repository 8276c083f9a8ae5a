"""The parameter-server simulation's predictions for the staleness study: reproducible, cached, bounded."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.staleness_accuracy import predicted
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
from tests.paths import REPO

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
    calls: list[tuple[str, int]] = []
    real = predicted.run_parameter_server

    def counting(workload: Any, cluster: str, workers: int, ps: Any, training: Any, **kwargs: Any) -> Any:
        calls.append((ps.mode, ps.staleness_bound))
        return real(workload, cluster, workers, ps, training, **kwargs)

    monkeypatch.setattr(predicted, "run_parameter_server", counting)
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
