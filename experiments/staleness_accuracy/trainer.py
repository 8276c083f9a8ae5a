"""Delayed-gradient SGD: what a parameter server applying stale gradients does to a real model.

The trainer takes the server's point of view. Workers share one parameter vector; the server
applies one worker gradient per update, and the gradient applied at update t was computed on the
parameters of version ``t - d``, with ``d`` drawn from a :class:`StalenessDistribution` (clipped to
``t`` at the start, when no older version exists). Past versions live in a ring buffer as deep as
the largest delay. The worker count enters through the distribution (an asynchronous server with W
equal workers gives d of about W-1); the batch per server update is the same in every mode, so the
accuracy differences measured are the staleness effect alone.

``damped=True`` is the staleness-mitigating variant: the step is ``lr / (1 + d)`` (staleness-aware
asynchronous SGD, Zhang, Gupta, Lian and Liu, IJCAI 2016). With every delay zero both are plain
synchronous minibatch SGD, bit for bit.

The model is a one-hidden-layer MLP (ReLU, softmax cross-entropy), or softmax regression with
``hidden=0``, written in numpy with hand-derived gradients: float64, single-threaded-sized, and
deterministic, so the same seed gives the same curve on the same machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from experiments.common.progress import bar
from experiments.staleness_accuracy.data import Dataset
from simcore.errors import TrainsimError
from simcore.staleness.distribution import StalenessDistribution

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MlpShape",
    "Setting",
    "SettingResult",
    "TrainerConfig",
    "TrainingRun",
    "init_parameters",
    "loss_and_gradient",
    "minibatch_indices",
    "predict",
    "run_settings",
    "seed_streams",
    "train_with_staleness",
]


@dataclass(frozen=True, slots=True)
class MlpShape:
    """Layer sizes; ``n_hidden == 0`` means softmax regression (no hidden layer)."""

    n_inputs: int
    n_hidden: int
    n_classes: int

    @property
    def layer_sizes(self) -> list[tuple[int, int]]:
        if self.n_hidden == 0:
            return [(self.n_inputs, self.n_classes)]
        return [(self.n_inputs, self.n_hidden), (self.n_hidden, self.n_classes)]

    @property
    def n_params(self) -> int:
        return sum(n_in * n_out + n_out for n_in, n_out in self.layer_sizes)


@dataclass(frozen=True, slots=True)
class TrainerConfig:
    """Hyper-parameters of one training run; ``epochs`` passes over the training set."""

    hidden: int = 32
    learning_rate: float = 0.2
    batch_size: int = 32
    epochs: int = 20
    evals_per_epoch: int = 2

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 0, "hidden units must be >= 0"),
            (self.learning_rate > 0, "learning rate must be > 0"),
            (self.batch_size >= 1, "batch size must be >= 1"),
            (self.epochs >= 1, "epochs must be >= 1"),
            (self.evals_per_epoch >= 1, "evaluations per epoch must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainsimError(message)


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """One seeded run: test accuracy after each evaluated update count, and the staleness it saw."""

    seed: int
    updates: tuple[int, ...]
    accuracy: tuple[float, ...]
    updates_per_epoch: int
    realized_mean_staleness: float
    realized_p99_staleness: float
    diverged: bool
    final_parameters: np.ndarray = field(compare=False, repr=False)

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1]

    def updates_to_reach(self, target: float) -> int | None:
        """The first evaluated update count with test accuracy >= ``target``; None if never."""
        return next((u for u, a in zip(self.updates, self.accuracy, strict=True) if a >= target), None)


def seed_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """Independent random streams (initialisation, minibatch order, delays) derived from one seed.

    Separate streams keep the initialisation and batch order identical whatever delays are drawn.
    """
    import numpy as np

    init, batches, delays = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(init), np.random.default_rng(batches), np.random.default_rng(delays)


def init_parameters(shape: MlpShape, rng: np.random.Generator) -> np.ndarray:
    """A flat float64 parameter vector: Glorot-uniform weights, zero biases, layer by layer."""
    import numpy as np

    parts = []
    for n_in, n_out in shape.layer_sizes:
        limit = np.sqrt(6.0 / (n_in + n_out))
        parts.append(rng.uniform(-limit, limit, size=n_in * n_out))
        parts.append(np.zeros(n_out))
    return np.concatenate(parts)


def _unpack(shape: MlpShape, params: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight matrix, bias) views of the flat vector, layer by layer."""
    layers, offset = [], 0
    for n_in, n_out in shape.layer_sizes:
        weight = params[offset : offset + n_in * n_out].reshape(n_in, n_out)
        offset += n_in * n_out
        layers.append((weight, params[offset : offset + n_out]))
        offset += n_out
    return layers


def _logits(shape: MlpShape, params: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output logits and the hidden activations (``x`` itself without a hidden layer)."""
    import numpy as np

    layers = _unpack(shape, params)
    if len(layers) == 1:
        return x @ layers[0][0] + layers[0][1], x
    hidden = np.maximum(x @ layers[0][0] + layers[0][1], 0.0)
    return hidden @ layers[1][0] + layers[1][1], hidden


def loss_and_gradient(
    shape: MlpShape, params: np.ndarray, x: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy over the batch and its gradient as a flat vector."""
    import numpy as np

    logits, hidden = _logits(shape, params, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = -float(log_probs[rows, y].mean())
    d_logits = np.exp(log_probs)
    d_logits[rows, y] -= 1.0
    d_logits /= len(y)
    layers = _unpack(shape, params)
    grads = [(hidden.T @ d_logits, d_logits.sum(axis=0))]
    if len(layers) == 2:
        d_hidden = (d_logits @ layers[1][0].T) * (hidden > 0.0)
        grads.insert(0, (x.T @ d_hidden, d_hidden.sum(axis=0)))
    return loss, np.concatenate([part.ravel() for pair in grads for part in pair])


def predict(shape: MlpShape, params: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Predicted class per row."""
    import numpy as np

    logits, _ = _logits(shape, params, x)
    return np.asarray(np.argmax(logits, axis=1))


def minibatch_indices(n_samples: int, batch_size: int, epochs: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of every minibatch, shape (updates, batch_size): a fresh permutation per epoch,
    cut into ``n_samples // batch_size`` batches (the incomplete last batch is dropped)."""
    import numpy as np

    per_epoch = n_samples // batch_size
    if per_epoch < 1:
        raise TrainsimError(f"batch size {batch_size} is larger than the training set ({n_samples})")
    batches = [
        rng.permutation(n_samples)[: per_epoch * batch_size].reshape(per_epoch, batch_size)
        for _ in range(epochs)
    ]
    return np.concatenate(batches)


def _evaluation_points(updates_per_epoch: int, config: TrainerConfig) -> list[int]:
    """Update counts after which test accuracy is measured (0 and the last update included)."""
    total = updates_per_epoch * config.epochs
    every = max(1, updates_per_epoch // config.evals_per_epoch)
    return sorted({0, *range(every, total, every), total})


def _test_accuracy(dataset: Dataset, shape: MlpShape, params: np.ndarray, diverged: bool) -> float:
    """Test accuracy; a diverged model scores a constant guess of the most common training label."""
    import numpy as np

    if diverged:
        return float(np.mean(dataset.y_test == np.bincount(dataset.y_train).argmax()))
    return float(np.mean(predict(shape, params, dataset.x_test) == dataset.y_test))


def train_with_staleness(
    dataset: Dataset,
    config: TrainerConfig,
    distribution: StalenessDistribution,
    seed: int,
    *,
    damped: bool = False,
) -> TrainingRun:
    """Run delayed-gradient SGD and record test accuracy along the way.

    A run whose parameters stop being finite (stale gradients can make SGD diverge) stops there;
    its remaining evaluations score a constant guess of the most common training label.
    """
    import numpy as np

    init_rng, batch_rng, delay_rng = seed_streams(seed)
    shape = MlpShape(dataset.n_features, config.hidden, dataset.n_classes)
    params = init_parameters(shape, init_rng)
    batches = minibatch_indices(len(dataset.y_train), config.batch_size, config.epochs, batch_rng)
    total = len(batches)
    delays = np.minimum(distribution.sample(delay_rng, total), np.arange(total))
    depth = int(delays.max()) + 1
    history = np.empty((depth, shape.n_params))
    evaluations = _evaluation_points(total // config.epochs, config)
    accuracy: list[float] = []
    diverged = False
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for update in range(total):
            if update == evaluations[len(accuracy)]:
                accuracy.append(_test_accuracy(dataset, shape, params, diverged))
            if diverged:
                continue
            delay = int(delays[update])
            history[update % depth] = params
            stale = history[(update - delay) % depth]
            rows = batches[update]
            _, gradient = loss_and_gradient(shape, stale, dataset.x_train[rows], dataset.y_train[rows])
            step = config.learning_rate / (1 + delay) if damped else config.learning_rate
            params = params - step * gradient
            diverged = not bool(np.isfinite(params).all())
        accuracy.append(_test_accuracy(dataset, shape, params, diverged))
    return TrainingRun(
        seed=seed,
        updates=tuple(evaluations),
        accuracy=tuple(accuracy),
        updates_per_epoch=total // config.epochs,
        realized_mean_staleness=float(delays.mean()),
        realized_p99_staleness=float(np.quantile(delays, 0.99, method="inverted_cdf")),
        diverged=diverged,
        final_parameters=params,
    )


@dataclass(frozen=True, slots=True)
class Setting:
    """One trained configuration: a staleness distribution applied in a parameter-server mode."""

    name: str
    family: str  # "sync", "fixed", "predicted", "measured" or "tail"
    mode: str  # sync, async, ssp or mitigated (mitigated damps the step by 1 / (1 + staleness))
    distribution: StalenessDistribution

    @property
    def damped(self) -> bool:
        return self.mode == "mitigated"


@dataclass(frozen=True, slots=True)
class SettingResult:
    """All seeds' runs of one setting."""

    setting: Setting
    runs: tuple[TrainingRun, ...]

    @property
    def final_accuracies(self) -> np.ndarray:
        import numpy as np

        return np.array([run.final_accuracy for run in self.runs])


def run_settings(
    dataset: Dataset, config: TrainerConfig, settings: Sequence[Setting], seeds: int, *, quiet: bool = True
) -> list[SettingResult]:
    """Train every setting with seeds 0..seeds-1, in the given order (a progress bar unless ``quiet``)."""
    results = []
    with bar(len(settings) * seeds, "training", quiet=quiet, unit="run") as progress:
        for s in settings:
            runs = []
            for seed in range(seeds):
                runs.append(train_with_staleness(dataset, config, s.distribution, seed, damped=s.damped))
                progress.update(1)
            results.append(SettingResult(s, tuple(runs)))
    return results
