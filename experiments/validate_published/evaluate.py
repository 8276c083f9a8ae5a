"""Predict every expressible row and summarise the errors per category.

A row is *predicted* when its setup resolves (every preset, model and device it names exists) and
it needs no missing feature; otherwise it is *not expressible* with every reason listed. A
simulator refusal (a :class:`~simcore.errors.TrainsimError` while predicting, e.g. a preset with
fewer GPUs than the row) also lists the row as not expressible, with the simulator's message.
Nothing is fitted to the rows: the simulator runs with its shipped defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from experiments.validate_published.mapping import CATEGORIES, RowPlan
from experiments.validate_published.metrics import error_pct, speed_bias_pct
from simcore.errors import TrainsimError

__all__ = ["CategorySummary", "RowResult", "evaluate", "summarise"]

PREDICTED = "predicted"
NOT_EXPRESSIBLE = "not_expressible"


@dataclass(frozen=True, slots=True)
class RowResult:
    """One published row against the simulator: the numbers, or why there are none."""

    id: int | str
    category: str
    status: str
    hardware: str
    workload: str
    strategy: str
    metric: str  # the row's metric as published
    unit: str
    measured: float
    predicted: float | None = None
    error_pct: float | None = None
    speed_bias_pct: float | None = None
    setup: str = ""
    algorithm: str = ""
    stated_algorithm: str = ""
    algorithm_match: bool | None = None
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str = ""
    # "scored", or "calibration": the row set (or restates) the constant named in ``constant`` and is
    # reported apart (:mod:`experiments.validate_published.calibration`)
    role: str = "scored"
    constant: str = ""
    # the calibrated column: the prediction with the source's own one-device rate as compute scale
    # (``anchor`` the row it comes from, ``compute_scale`` the scalar); None where the row has no anchor
    calibrated: float | None = None
    calibrated_error_pct: float | None = None
    calibrated_bias_pct: float | None = None
    anchor: int | None = None
    compute_scale: float | None = None


@dataclass(frozen=True, slots=True)
class CategorySummary:
    """Errors of one category: MAPE and mean speed bias over its predicted rows, uncalibrated and
    calibrated (each row's calibrated value where it has an anchor, else its uncalibrated one; the
    anchors themselves left out of the calibrated figures)."""

    category: str
    rows: int
    predicted: int
    not_expressible: int
    mape_pct: float | None
    bias_pct: float | None
    algorithm_checked: int
    algorithm_matched: int
    calibrated_rows: int = 0
    calibrated_mape_pct: float | None = None
    calibrated_bias_pct: float | None = None


CALIBRATION = "calibration"
CALIBRATION_SUMMARY = "calibration rows"


def _base(plan: RowPlan, status: str) -> RowResult:
    row = plan.row
    notes = tuple(n for n in (plan.note, row.note and f"source: {row.note}") if n)
    return RowResult(
        row.id, plan.category, status, row.hardware, row.workload, row.strategy, row.metric,
        row.unit, row.value, stated_algorithm=plan.stated_algorithm, notes=notes, source=row.source,
    )  # fmt: skip


def _unexpressible(plan: RowPlan, reasons: Sequence[str]) -> RowResult:
    setup = plan.setup.describe() if plan.setup is not None else ""
    return replace(_base(plan, NOT_EXPRESSIBLE), setup=setup, reasons=tuple(reasons))


def _predict(plan: RowPlan) -> RowResult:
    reasons = plan.all_reasons()
    if reasons or plan.setup is None or plan.metric is None:
        return _unexpressible(plan, reasons)
    try:
        prediction = plan.setup.predict(plan.metric.name)
    except TrainsimError as exc:
        return _unexpressible(plan, [f"the simulator refused the setup: {exc}"])
    if not (math.isfinite(prediction.value) and prediction.value > 0):
        return _unexpressible(plan, [f"the simulator gave no usable value ({prediction.value!r})"])
    base = _base(plan, PREDICTED)
    measured, stated = plan.row.value, plan.stated_algorithm
    warning = (f"simulator: {prediction.warning}",) if prediction.warning else ()
    return replace(
        base,
        predicted=prediction.value,
        error_pct=error_pct(prediction.value, measured),
        speed_bias_pct=speed_bias_pct(plan.metric, prediction.value, measured),
        setup=prediction.setup,
        algorithm=prediction.algorithm,
        algorithm_match=(prediction.algorithm == stated) if stated else None,
        notes=base.notes + warning,
    )


def evaluate(plans: Sequence[RowPlan], progress: Callable[[str], None] | None = None) -> list[RowResult]:
    """A result per plan, in the order given."""
    results = []
    for index, plan in enumerate(plans, 1):
        results.append(_predict(plan))
        if progress is not None:
            progress(f"[{index}/{len(plans)}] row {plan.row.id}: {results[-1].status}")
    return results


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _calibrated_pairs(done: Sequence[RowResult]) -> list[tuple[float, float]]:
    """(error, bias) of the calibrated column: a row's calibrated pair, else its uncalibrated one."""
    pairs = []
    for r in done:
        if r.anchor == r.id:
            continue
        if r.calibrated_error_pct is not None and r.calibrated_bias_pct is not None:
            pairs.append((r.calibrated_error_pct, r.calibrated_bias_pct))
        elif r.error_pct is not None and r.speed_bias_pct is not None:
            pairs.append((r.error_pct, r.speed_bias_pct))
    return pairs


def _summary(category: str, rows: Sequence[RowResult]) -> CategorySummary:
    done = [r for r in rows if r.status == PREDICTED]
    errors = [abs(r.error_pct) for r in done if r.error_pct is not None]
    biases = [r.speed_bias_pct for r in done if r.speed_bias_pct is not None]
    checked = [r for r in done if r.algorithm_match is not None]
    pairs = _calibrated_pairs(done)
    return CategorySummary(
        category,
        len(rows),
        len(done),
        len(rows) - len(done),
        _mean(errors),
        _mean(biases),
        len(checked),
        sum(1 for r in checked if r.algorithm_match),
        sum(1 for r in done if r.calibrated is not None),
        _mean([abs(e) for e, _ in pairs]),
        _mean([b for _, b in pairs]),
    )


def summarise(results: Sequence[RowResult]) -> list[CategorySummary]:
    """One summary per category that has scored rows, in :data:`CATEGORIES` order, then one line
    for the calibration rows (:data:`CALIBRATION_SUMMARY`) when there are any: they score nothing."""
    scored = [r for r in results if r.role != CALIBRATION]
    out = [_summary(c, rows) for c in CATEGORIES if (rows := [r for r in scored if r.category == c])]
    calibration = [r for r in results if r.role == CALIBRATION]
    if calibration:
        out.append(_summary(CALIBRATION_SUMMARY, calibration))
    return out
