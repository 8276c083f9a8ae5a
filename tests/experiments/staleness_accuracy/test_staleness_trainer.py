"""The delayed-gradient trainer: exact agreement with plain SGD at zero staleness, and with a
straightforward delayed-SGD loop that keeps every past version; determinism; no crash when stale
gradients make SGD diverge; the hand-written gradient; the datasets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.staleness_accuracy.data import (
    Dataset,
    gaussian_bayes_accuracy,
    gaussian_dataset,
    load_dataset,
)
from experiments.staleness_accuracy.trainer import (
    MlpShape,
    TrainerConfig,
    init_parameters,
    loss_and_gradient,
    predict,
    seed_streams,
    train_with_staleness,
)
from simcore.errors import TrainsimError
from simcore.staleness.distribution import StalenessDistribution, fixed_staleness, staleness_from_histogram


def tiny_dataset(n_train: int = 70, n_features: int = 6, n_classes: int = 3) -> Dataset:
    """A small random task, so property tests run many cases quickly."""
    rng = np.random.default_rng(7)
    y = rng.integers(0, n_classes, size=n_train + 30)
    x = rng.standard_normal((n_train + 30, n_features))
    x[np.arange(len(y)), y] += 1.5
    return Dataset("tiny", "tiny", x[:n_train], y[:n_train], x[n_train:], y[n_train:], n_classes)


def reference_sgd(dataset: Dataset, config: TrainerConfig, seed: int) -> np.ndarray:
    """Plain synchronous minibatch SGD, written out: shuffle each epoch, step on each full batch."""
    init_rng, batch_rng, _ = seed_streams(seed)
    shape = MlpShape(dataset.n_features, config.hidden, dataset.n_classes)
    params = init_parameters(shape, init_rng)
    n, b = len(dataset.y_train), config.batch_size
    for _ in range(config.epochs):
        order = batch_rng.permutation(n)
        for start in range(0, (n // b) * b, b):
            rows = order[start : start + b]
            _, gradient = loss_and_gradient(shape, params, dataset.x_train[rows], dataset.y_train[rows])
            params = params - config.learning_rate * gradient
    return params


def reference_delayed_sgd(
    dataset: Dataset, config: TrainerConfig, dist: StalenessDistribution, seed: int, damped: bool
) -> np.ndarray:
    """Delayed SGD keeping *every* version in a list (no ring buffer): update t uses version t - d_t."""
    init_rng, batch_rng, delay_rng = seed_streams(seed)
    shape = MlpShape(dataset.n_features, config.hidden, dataset.n_classes)
    versions = [init_parameters(shape, init_rng)]
    n, b = len(dataset.y_train), config.batch_size
    batches = [batch_rng.permutation(n)[: (n // b) * b].reshape(-1, b) for _ in range(config.epochs)]
    all_batches = np.concatenate(batches)
    delays = dist.sample(delay_rng, len(all_batches))
    for t, rows in enumerate(all_batches):
        d = min(int(delays[t]), t)
        _, gradient = loss_and_gradient(shape, versions[t - d], dataset.x_train[rows], dataset.y_train[rows])
        step = config.learning_rate / (1 + d) if damped else config.learning_rate
        versions.append(versions[t] - step * gradient)
    return versions[-1]


@pytest.mark.parametrize("hidden", [0, 8])
@pytest.mark.parametrize("damped", [False, True])
def test_zero_staleness_is_plain_sgd_bit_for_bit(hidden: int, damped: bool) -> None:
    """Zero delay (undamped or damped: lr / (1 + 0) = lr) gives exactly the reference SGD's parameters."""
    dataset = tiny_dataset()
    config = TrainerConfig(hidden=hidden, learning_rate=0.3, batch_size=8, epochs=3)
    run = train_with_staleness(dataset, config, fixed_staleness(0), seed=11, damped=damped)
    expected = reference_sgd(dataset, config, 11)
    assert np.array_equal(run.final_parameters, expected)
    shape = MlpShape(dataset.n_features, hidden, dataset.n_classes)
    assert run.final_accuracy == float(np.mean(predict(shape, expected, dataset.x_test) == dataset.y_test))
    assert run.realized_mean_staleness == 0.0


def test_zero_staleness_on_digits_matches_plain_sgd() -> None:
    """The same exactness on the real dataset and default model."""
    dataset = load_dataset("digits")
    config = TrainerConfig(epochs=2)
    run = train_with_staleness(dataset, config, fixed_staleness(0), seed=3)
    assert np.array_equal(run.final_parameters, reference_sgd(dataset, config, 3))


delay_histograms = st.dictionaries(st.integers(0, 40), st.integers(1, 5), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None)
@given(delay_histograms, st.integers(0, 1000), st.booleans(), st.sampled_from([0.05, 0.5, 5.0]))
def test_ring_buffer_matches_keeping_every_version(
    counts: dict[int, int], seed: int, damped: bool, lr: float
) -> None:
    """Any delay distribution, any learning rate (even diverging ones): the ring-buffer trainer equals the
    all-versions reference bit for bit, never raises, and reports staleness it actually applied."""
    dataset = tiny_dataset()
    config = TrainerConfig(hidden=4, learning_rate=lr, batch_size=10, epochs=2)
    dist = staleness_from_histogram(counts, "h")
    run = train_with_staleness(dataset, config, dist, seed, damped=damped)
    expected = reference_delayed_sgd(dataset, config, dist, seed, damped)
    if run.diverged:
        assert not np.isfinite(expected).all()
    else:
        assert np.array_equal(run.final_parameters, expected)
    assert 0.0 <= run.realized_mean_staleness <= dist.max_delay
    assert all(0.0 <= a <= 1.0 for a in run.accuracy)
    assert run.updates[0] == 0 and run.updates[-1] == run.updates_per_epoch * config.epochs


@settings(max_examples=10, deadline=None)
@given(delay_histograms, st.integers(0, 1000))
def test_same_seed_same_run(counts: dict[int, int], seed: int) -> None:
    dataset = tiny_dataset()
    config = TrainerConfig(hidden=4, learning_rate=0.5, batch_size=10, epochs=2)
    dist = staleness_from_histogram(counts, "h")
    first = train_with_staleness(dataset, config, dist, seed)
    second = train_with_staleness(dataset, config, dist, seed)
    assert first == second
    assert np.array_equal(first.final_parameters, second.final_parameters, equal_nan=True)


def test_different_seeds_differ() -> None:
    dataset = tiny_dataset()
    config = TrainerConfig(hidden=4, batch_size=10, epochs=2)
    runs = [train_with_staleness(dataset, config, fixed_staleness(2), seed) for seed in (0, 1)]
    assert not np.array_equal(runs[0].final_parameters, runs[1].final_parameters)


def test_divergence_stops_training_and_scores_a_constant_guess() -> None:
    """An absurd learning rate overflows to non-finite parameters; the run ends cleanly and says so."""
    dataset = tiny_dataset()
    config = TrainerConfig(hidden=4, learning_rate=1e300, batch_size=10, epochs=3)
    run = train_with_staleness(dataset, config, fixed_staleness(1), seed=0)
    assert run.diverged
    majority = np.bincount(dataset.y_train).argmax()
    assert run.final_accuracy == float(np.mean(dataset.y_test == majority))


def test_staleness_costs_accuracy_on_digits() -> None:
    """The study's premise, checked on the real data: a long fixed delay hurts, damping limits the harm."""
    dataset = load_dataset("digits")
    config = TrainerConfig(epochs=10)
    sync = train_with_staleness(dataset, config, fixed_staleness(0), seed=0).final_accuracy
    stale = train_with_staleness(dataset, config, fixed_staleness(24), seed=0).final_accuracy
    damped = train_with_staleness(dataset, config, fixed_staleness(24), seed=0, damped=True).final_accuracy
    assert sync > 0.9
    assert stale < sync - 0.1
    assert damped > stale


@pytest.mark.parametrize("hidden", [0, 5])
def test_gradient_matches_finite_differences(hidden: int) -> None:
    rng = np.random.default_rng(0)
    shape = MlpShape(4, hidden, 3)
    params = init_parameters(shape, rng) + 0.1 * rng.standard_normal(shape.n_params)
    x, y = rng.standard_normal((6, 4)), rng.integers(0, 3, size=6)
    _, gradient = loss_and_gradient(shape, params, x, y)
    numeric = np.zeros_like(params)
    for i in range(len(params)):
        bump = np.zeros_like(params)
        bump[i] = 1e-6
        numeric[i] = (
            loss_and_gradient(shape, params + bump, x, y)[0]
            - loss_and_gradient(shape, params - bump, x, y)[0]
        ) / 2e-6
    assert np.allclose(gradient, numeric, atol=1e-7)


def test_gradient_matches_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    shape = MlpShape(8, 6, 4)
    params = init_parameters(shape, rng)
    x, y = rng.standard_normal((5, 8)), rng.integers(0, 4, size=5)
    loss, gradient = loss_and_gradient(shape, params, x, y)
    p = torch.tensor(params, requires_grad=True)
    w1, b1 = p[:48].reshape(8, 6), p[48:54]
    w2, b2 = p[54:78].reshape(6, 4), p[78:82]
    logits = torch.relu(torch.tensor(x) @ w1 + b1) @ w2 + b2
    torch_loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y))
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=1e-12)
    assert np.allclose(gradient, p.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(TrainsimError, match="learning rate"):
        TrainerConfig(learning_rate=0)
    with pytest.raises(TrainsimError, match="larger than the training set"):
        train_with_staleness(tiny_dataset(), TrainerConfig(batch_size=1000, epochs=1), fixed_staleness(0), 0)


def test_digits_is_the_real_bundled_dataset() -> None:
    dataset = load_dataset("digits")
    assert len(dataset.y_train) + len(dataset.y_test) == 1797
    assert dataset.n_features == 64 and dataset.n_classes == 10
    assert dataset.x_train.min() >= 0.0 and dataset.x_train.max() <= 1.0


def test_gaussian_task_has_the_bayes_error_it_was_built_with() -> None:
    """The Bayes rule (largest of the class coordinates) scores the set accuracy on a large sample."""
    dataset = gaussian_dataset(bayes_error=0.2, n_train=20_000, n_test=20_000)
    assert dataset.bayes_accuracy == pytest.approx(0.8)
    bayes_rule = np.argmax(dataset.x_test[:, : dataset.n_classes], axis=1)
    assert float(np.mean(bayes_rule == dataset.y_test)) == pytest.approx(0.8, abs=0.01)


@settings(max_examples=10, deadline=None)
@given(st.floats(0.0, 6.0), st.floats(0.0, 6.0))
def test_bayes_accuracy_grows_with_separation(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert gaussian_bayes_accuracy(low) <= gaussian_bayes_accuracy(high) + 1e-12


def test_unknown_dataset_and_bad_bayes_error() -> None:
    with pytest.raises(TrainsimError, match="allowed: digits, gaussian"):
        load_dataset("mnist")
    with pytest.raises(TrainsimError, match="bayes error"):
        gaussian_dataset(bayes_error=0.95)
