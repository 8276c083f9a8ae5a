"""The staleness accuracy-penalty model: its fit, its shipped coefficients, and the estimate.

:func:`fit_penalty_model` fits, per parameter-server mode, how many accuracy points a staleness
distribution costs against synchronous training, from the delayed-gradient study in
``experiments.staleness_accuracy`` (:class:`PenaltyObservation` is one measured setting);
:func:`load_penalty_coefficients` reads the fit (``simcore/data/staleness_penalty.json`` unless
told otherwise) and :func:`estimate_accuracy_penalty` evaluates it at a distribution's mean and p99.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from simcore.errors import TrainsimError
from simcore.inputs import read_text

# numpy is imported inside the functions that use it, so --help does not load it.

__all__ = [
    "PENALTY_COEFFICIENTS_FILE",
    "PenaltyObservation",
    "estimate_accuracy_penalty",
    "fit_penalty_model",
    "load_penalty_coefficients",
]

PENALTY_COEFFICIENTS_FILE = "staleness_penalty.json"


def load_penalty_coefficients(path: str | Path | None = None) -> dict[str, Any]:
    """The fitted penalty model: the shipped ``simcore/data/staleness_penalty.json`` unless ``path``."""
    if path is None:
        text = resources.files("simcore.data").joinpath(PENALTY_COEFFICIENTS_FILE).read_text(encoding="utf-8")
        where = f"simcore/data/{PENALTY_COEFFICIENTS_FILE}"
    else:
        where = str(path)
        if not Path(path).exists():
            raise TrainsimError(f"penalty coefficients file not found: {path}")
        text = read_text(path, "penalty coefficients (JSON)")
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("fits"), dict):
        raise TrainsimError(f"{where}: expected an object with a 'fits' table per mode")
    return data


@dataclass(frozen=True, slots=True)
class PenaltyObservation:
    """One measured setting of the penalty study (penalty in accuracy points against sync).

    ``fixed`` settings (every gradient equally stale) give the penalty curve's knots; the others
    (spread or long-tailed distributions) decide how mean and p99 combine. ``updates_to_target_factor``
    is the setting's updates to the target accuracy over sync's, None unless every seed reached it.
    """

    label: str
    mean_staleness: float
    p99_staleness: float
    penalty_points: float
    updates_to_target_factor: float | None
    fixed: bool


def fit_penalty_model(observations: Sequence[PenaltyObservation]) -> dict[str, Any]:
    """The model :func:`estimate_accuracy_penalty` evaluates, fitted to one mode's observations.

    Knots: (0, 0) and every fixed delay's penalty, made monotone (a running maximum, clipped at 0,
    so noise never makes more staleness look better); the slowdown likewise, null once a delay
    stops reaching the target. ``alpha_mean`` (grid of 0.01) minimises the RMSE of the spread
    settings' penalties predicted at ``x = alpha * mean + (1 - alpha) * p99``.
    """
    import numpy as np

    fixed = sorted((o for o in observations if o.fixed), key=lambda o: o.mean_staleness)
    spread = [o for o in observations if not o.fixed]
    if not fixed or not spread:
        raise TrainsimError("the penalty fit needs fixed-delay and spread-distribution observations")
    knots_x = np.array([0.0, *(o.mean_staleness for o in fixed)])
    penalty = np.maximum.accumulate(np.maximum(0.0, [0.0, *(o.penalty_points for o in fixed)]))
    measured = np.array([o.penalty_points for o in spread])

    def spread_rmse(alpha: float) -> float:
        import numpy as np

        x = np.array([alpha * o.mean_staleness + (1 - alpha) * o.p99_staleness for o in spread])
        return float(np.sqrt(np.mean((np.interp(x, knots_x, penalty) - measured) ** 2)))

    alphas = np.round(np.linspace(0.0, 1.0, 101), 2)
    errors = [spread_rmse(a) for a in alphas]
    best = int(np.argmin(errors))
    factors: list[float | None] = [1.0]
    for o in fixed:
        stopped = o.updates_to_target_factor is None or factors[-1] is None
        factors.append(None if stopped else max(factors[-1] or 1.0, o.updates_to_target_factor or 1.0))
    knots = [
        {
            "staleness": float(x),
            "penalty_points": round(float(p), 3),
            "updates_to_target_factor": f if f is None else round(f, 3),
        }
        for x, p, f in zip(knots_x, penalty, factors, strict=True)
    ]
    return {"alpha_mean": float(alphas[best]), "rmse_points_spread": round(errors[best], 3), "knots": knots}


def _effective_staleness(fit: Mapping[str, Any], mean_staleness: float, p99_staleness: float) -> float:
    """x = alpha * mean + (1 - alpha) * p99: how the fit folds a distribution into one delay."""
    alpha = float(fit["alpha_mean"])
    return alpha * mean_staleness + (1.0 - alpha) * p99_staleness


def _slowdown_at(knots: list[dict[str, Any]], x: float) -> float | None:
    """Updates-to-target factor at effective staleness ``x``; None past the last knot that reached it."""
    import numpy as np

    reached = [
        (float(k["staleness"]), float(k["updates_to_target_factor"]))
        for k in knots
        if k["updates_to_target_factor"] is not None
    ]
    never = [float(k["staleness"]) for k in knots if k["updates_to_target_factor"] is None]
    if not reached or (never and x > reached[-1][0]):
        return None
    return float(np.interp(x, [k[0] for k in reached], [k[1] for k in reached]))


def estimate_accuracy_penalty(
    mean_staleness: float,
    p99_staleness: float,
    *,
    mitigated: bool = False,
    coefficients_path: str | Path | None = None,
) -> dict[str, Any]:
    """ESTIMATED accuracy cost of training with this staleness, from a small-model study.

    Basis: delayed-gradient SGD (``python -m experiments.staleness_accuracy --fit-penalty``) of a
    one-hidden-layer MLP on scikit-learn's 8x8 handwritten digits, several seeds, fixed delays and
    long-tailed delay distributions. Fixed delays give the penalty against delay (a monotone
    piecewise-linear curve through the measured points); the long-tailed runs fit how the mean and
    the p99 of a distribution combine into one effective delay, ``x = alpha * mean + (1 - alpha) *
    p99``. Coefficients, measured points and provenance (command, date, machine) live in
    ``simcore/data/staleness_penalty.json``. This is an order-of-magnitude guide for what_if, not a
    prediction for a particular large model: the real cost also depends on learning rate, batch
    size, optimiser and model. ``mitigated`` selects the fit for staleness-dependent damping
    (lr / (1 + staleness)). In the shipped fit alpha is 1.0 for both modes: rare large delays cost
    little, and a fixed delay costs more than a spread distribution of the same mean, so the
    estimate errs high (cautious) for spread distributions (spread-run RMSE is in the file).

    Returns ``penalty_points`` (accuracy percentage points lost against synchronous training, >= 0),
    ``updates_to_target_factor`` (how many times as many server updates as sync to reach the study's
    target accuracy; None where the study's runs never reached it), ``effective_staleness``,
    ``extrapolated`` (beyond the largest delay studied; the last measured value is held), ``basis``
    and ``provenance``.
    """
    import numpy as np

    for name, value in (("mean_staleness", mean_staleness), ("p99_staleness", p99_staleness)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise TrainsimError(f"{name} must be a finite number >= 0, got {value!r}")
    data = load_penalty_coefficients(coefficients_path)
    mode = "mitigated" if mitigated else "async"
    if mode not in data["fits"]:
        raise TrainsimError(
            f"penalty coefficients have no fit for mode {mode!r}; present: {sorted(data['fits'])}"
        )
    fit = data["fits"][mode]
    knots = fit["knots"]
    x = _effective_staleness(fit, float(mean_staleness), float(p99_staleness))
    knot_x = [float(k["staleness"]) for k in knots]
    penalty = float(np.interp(x, knot_x, [float(k["penalty_points"]) for k in knots]))
    return {
        "mode": mode,
        "penalty_points": max(0.0, penalty),
        "updates_to_target_factor": _slowdown_at(knots, x),
        "effective_staleness": x,
        "extrapolated": x > knot_x[-1],
        "basis": data.get("basis", {}),
        "provenance": data.get("provenance", {}),
        "note": "estimate from a small-model delayed-gradient study; see simcore/data/staleness_penalty.json",
    }
