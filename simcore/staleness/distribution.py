"""Gradient staleness as data: distributions, seeded sampling and loading.

Staleness of one applied update is the server's parameter version when the update is applied minus
the version the gradient was computed from (the parameter server's definition): 0 is synchronous SGD, an
asynchronous parameter server with W equal workers gives about W-1, stale-synchronous training
with bound s never more than s.

A :class:`StalenessDistribution` is a discrete distribution over non-negative integer delays. It
comes from a fixed delay, from measured samples (the ``staleness`` lists that real asynchronous
parameter-server runs write into their step records), or from a histogram (such as a simulated
run's :attr:`simcore.paramserver.PSResult.staleness_histogram`, which the staleness study turns
into distributions in ``experiments.staleness_accuracy.predicted``).
:func:`simcore.staleness.penalty.estimate_accuracy_penalty` turns a distribution's mean and p99
into an estimated accuracy cost, fitted from the delayed-gradient study in
``experiments.staleness_accuracy``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcore.errors import TrainsimError
from simcore.inputs import decode_text, read_bytes
from simcore.limits import MEASUREMENT_FILE_BYTES

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "StalenessDistribution",
    "fixed_staleness",
    "load_measured_staleness",
    "staleness_from_histogram",
    "staleness_from_samples",
]


@dataclass(frozen=True, slots=True)
class StalenessDistribution:
    """How many server versions old the gradients applied in a training run are.

    ``delays`` are distinct non-negative integers in increasing order and ``probabilities`` their
    probabilities (summing to 1). ``label`` names the setting in reports; ``source`` says where the
    numbers come from (fixed, a measurement file, the simulator).
    """

    delays: tuple[int, ...]
    probabilities: tuple[float, ...]
    label: str
    source: str

    def __post_init__(self) -> None:
        if not self.delays or len(self.delays) != len(self.probabilities):
            raise TrainsimError(f"staleness distribution {self.label!r}: needs one probability per delay")
        if any(d < 0 for d in self.delays) or list(self.delays) != sorted(set(self.delays)):
            raise TrainsimError(
                f"staleness distribution {self.label!r}: delays must be distinct non-negative "
                f"integers in increasing order, got {list(self.delays)[:8]}"
            )
        if any(not math.isfinite(p) or p < 0 for p in self.probabilities):
            raise TrainsimError(f"staleness distribution {self.label!r}: probabilities must be >= 0")
        if not math.isclose(math.fsum(self.probabilities), 1.0, rel_tol=1e-9):
            raise TrainsimError(f"staleness distribution {self.label!r}: probabilities must sum to 1")

    @property
    def mean(self) -> float:
        """Expected staleness, in server versions."""
        return math.fsum(d * p for d, p in zip(self.delays, self.probabilities, strict=True))

    @property
    def max_delay(self) -> int:
        """The largest staleness with non-zero probability (the ring buffer depth a trainer needs, less one)."""
        return max(d for d, p in zip(self.delays, self.probabilities, strict=True) if p > 0)

    def quantile(self, q: float) -> int:
        """The smallest delay whose cumulative probability reaches ``q`` (0 < q <= 1)."""
        import numpy as np

        if not 0.0 < q <= 1.0:
            raise TrainsimError(f"quantile must be in (0, 1], got {q}")
        cumulative = np.cumsum(self.probabilities)
        index = int(np.searchsorted(cumulative, q - 1e-12, side="left"))
        return self.delays[min(index, len(self.delays) - 1)]

    @property
    def p50(self) -> int:
        return self.quantile(0.5)

    @property
    def p99(self) -> int:
        return self.quantile(0.99)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent delays drawn with ``rng`` (one uniform draw each, so reproducible by seed)."""
        import numpy as np

        cumulative = np.cumsum(self.probabilities)
        index = np.searchsorted(cumulative, rng.random(size), side="right")
        return np.asarray(self.delays, dtype=np.int64)[np.minimum(index, len(self.delays) - 1)]


def _as_delay(value: Any, where: str) -> int:
    """A staleness value from user data: a non-negative integer (``2.0`` is accepted as 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainsimError(f"{where}: staleness must be a non-negative integer, got {value!r}")
    if value < 0 or value != int(value):
        raise TrainsimError(f"{where}: staleness must be a non-negative integer, got {value!r}")
    return int(value)


def fixed_staleness(delay: int, label: str | None = None) -> StalenessDistribution:
    """Every gradient is exactly ``delay`` versions old."""
    d = _as_delay(delay, "fixed delay")
    return StalenessDistribution((d,), (1.0,), label or f"delay {d}", "fixed")


def staleness_from_histogram(
    counts: Mapping[int, float], label: str, source: str = "histogram"
) -> StalenessDistribution:
    """A distribution from ``{delay: count or weight}``; weights are normalised."""
    weights = {_as_delay(d, label): float(w) for d, w in counts.items()}
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise TrainsimError(f"{label}: histogram counts must be finite and >= 0")
    total = math.fsum(weights.values())
    if total <= 0:
        raise TrainsimError(f"{label}: histogram has no observations")
    delays = tuple(sorted(d for d, w in weights.items() if w > 0))
    return StalenessDistribution(delays, tuple(weights[d] / total for d in delays), label, source)


def staleness_from_samples(
    samples: Iterable[Any], label: str, source: str = "samples"
) -> StalenessDistribution:
    """The empirical distribution of observed staleness values."""
    counts: dict[int, float] = {}
    for value in samples:
        d = _as_delay(value, label)
        counts[d] = counts.get(d, 0.0) + 1.0
    if not counts:
        raise TrainsimError(f"{label}: no staleness samples")
    return staleness_from_histogram(counts, label, source)


def _samples_from_jsonl(path: Path, text: str) -> list[Any]:
    """Staleness values of the ``"kind": "step"`` records; a torn last line (a killed job) is skipped.

    calibrate.train writes the same updates twice: each worker's step record holds the staleness the
    servers reported for its push (one value per server shard), each server's record the staleness
    of every update it applied. Server records are used when present, worker records otherwise.
    Negative values are calibrate's "no update applied" sentinel (the first pull) and are skipped.
    """
    steps: list[tuple[int, dict[str, Any]]] = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                break
            raise TrainsimError(f"{path}:{lineno}: not a JSON record: {line[:60]!r}") from None
        if isinstance(record, dict) and record.get("kind") == "step" and "staleness" in record:
            if not isinstance(record["staleness"], list):
                raise TrainsimError(f"{path}:{lineno}: 'staleness' must be a list of integers")
            steps.append((lineno, record))
    if any(record.get("role") == "server" for _, record in steps):
        steps = [(n, r) for n, r in steps if r.get("role") == "server"]
    samples: list[Any] = []
    for lineno, record in steps:
        for value in record["staleness"]:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                continue
            samples.append(_as_delay(value, f"{path}:{lineno}"))
    return samples


def load_measured_staleness(path: str | Path, label: str | None = None) -> StalenessDistribution:
    """Staleness measured in real runs: calibrate.train JSONL, a JSON list, or ``{"histogram": {...}}``.

    JSONL files contribute the ``staleness`` lists of their ``"kind": "step"`` records (server
    records when present; see :func:`_samples_from_jsonl`). A plain JSON list holds staleness
    samples directly (negative values are an error there).
    """
    p = Path(path)
    if not p.exists():
        raise TrainsimError(f"measured staleness file not found: {p}")
    text = decode_text(
        read_bytes(p, "measured staleness (JSON or JSONL)", MEASUREMENT_FILE_BYTES), str(p), "JSON"
    )
    name = label or f"measured {p.name}"
    source = f"measured: {p.name}"
    try:
        whole: Any = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        return staleness_from_samples(whole, name, source)
    if isinstance(whole, dict) and isinstance(whole.get("histogram"), dict):
        return staleness_from_histogram({int(k): v for k, v in whole["histogram"].items()}, name, source)
    samples = _samples_from_jsonl(p, text)
    if not samples:
        raise TrainsimError(
            f'{p}: no staleness found; expected JSONL records with "kind": "step" and a '
            f'"staleness" list, a JSON list of integers, or {{"histogram": {{delay: count}}}}'
        )
    return staleness_from_samples(samples, name, source)
