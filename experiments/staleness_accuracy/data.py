"""Datasets for the staleness-to-accuracy study: real data that ships offline, and a synthetic task.

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images of 10 classes, the UCI
  "Optical Recognition of Handwritten Digits" test set). Real data, installed with scikit-learn, no
  download; small enough that one training run takes well under a second on one core, hard enough
  (about 97% test accuracy for a small MLP) that stale gradients visibly cost accuracy.
- ``gaussian``: ten Gaussian classes with a *known* Bayes error, for a difficulty that is set rather
  than found. Class k has mean ``a * e_k`` in 20 dimensions (unit covariance, equal priors), so the
  Bayes classifier picks the largest of the first ten coordinates and its accuracy is
  ``integral phi(z) Phi(z + a)^9 dz``; ``a`` is solved for the requested Bayes error.

The train/test split is fixed (it never depends on the training seed), so seeds vary only the
model's initialisation, the minibatch order and the drawn delays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DATASETS",
    "Dataset",
    "digits_dataset",
    "gaussian_bayes_accuracy",
    "gaussian_dataset",
    "load_dataset",
]

SPLIT_SEED = 20260101
"""Seed of the fixed train/test split and of the synthetic samples (never the training seed)."""


@dataclass(frozen=True, slots=True)
class Dataset:
    """A classification task split into train and test sets (features float64, labels int64)."""

    name: str
    description: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    bayes_accuracy: float | None = None
    why: str = ""

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


def _split(x: np.ndarray, y: np.ndarray, test_fraction: float) -> tuple[np.ndarray, ...]:
    """A fixed random split (the same every call, whatever the training seed)."""
    import numpy as np

    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    n_test = round(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def digits_dataset() -> Dataset:
    """scikit-learn's 8x8 digits, pixel values scaled to [0, 1], 80/20 fixed split."""
    import numpy as np

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise TrainsimError(
            "dataset 'digits' needs scikit-learn (pip install scikit-learn); or use --dataset gaussian"
        ) from None
    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    x_train, y_train, x_test, y_test = _split(x, y, 0.2)
    description = (
        f"scikit-learn load_digits: 8x8 handwritten digits, 10 classes, "
        f"{len(y_train)} train / {len(y_test)} test (fixed split)"
    )
    why = "real data that ships inside scikit-learn (no download); a small MLP trains in under a second and stale gradients visibly cost it accuracy"
    return Dataset("digits", description, x_train, y_train, x_test, y_test, 10, why=why)


def gaussian_bayes_accuracy(separation: float, n_classes: int = 10) -> float:
    """Bayes accuracy of the class-means-on-axes Gaussian task: P(a + Z_0 > max Z_j)."""
    from scipy import integrate, stats

    def integrand(z: float) -> float:
        return float(stats.norm.pdf(z) * stats.norm.cdf(z + separation) ** (n_classes - 1))

    value, _ = integrate.quad(integrand, -12.0, 12.0, limit=200)
    return float(value)


def gaussian_dataset(
    bayes_error: float = 0.10,
    n_classes: int = 10,
    n_features: int = 20,
    n_train: int = 1500,
    n_test: int = 500,
) -> Dataset:
    """Gaussian classes with means ``a * e_k``, ``a`` set so the Bayes error is ``bayes_error``."""
    import numpy as np
    from scipy import optimize

    chance_error = 1.0 - 1.0 / n_classes
    if not 0.0 < bayes_error < chance_error:
        raise TrainsimError(f"bayes error must be in (0, {chance_error:.2f}), got {bayes_error}")
    if n_features < n_classes:
        raise TrainsimError(f"gaussian task needs n_features >= n_classes ({n_classes}), got {n_features}")
    separation = float(
        optimize.brentq(
            lambda a: 1.0 - gaussian_bayes_accuracy(a, n_classes) - bayes_error, 0.0, 20.0, xtol=1e-12
        )
    )
    rng = np.random.default_rng(SPLIT_SEED)
    n_total = n_train + n_test
    y = rng.integers(0, n_classes, size=n_total).astype(np.int64)
    x = rng.standard_normal((n_total, n_features))
    x[np.arange(n_total), y] += separation
    description = (
        f"Gaussian classes, {n_classes} classes in {n_features} dims, Bayes error {bayes_error:.1%} "
        f"(mean separation {separation:.3f}), {n_train} train / {n_test} test"
    )
    return Dataset(
        "gaussian",
        description,
        x[:n_train],
        y[:n_train],
        x[n_train:],
        y[n_train:],
        n_classes,
        1.0 - bayes_error,
    )


DATASETS: dict[str, Callable[[], Dataset]] = {"digits": digits_dataset, "gaussian": gaussian_dataset}


def load_dataset(name: str) -> Dataset:
    """A dataset from :data:`DATASETS` by name."""
    if name not in DATASETS:
        raise TrainsimError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    return DATASETS[name]()
