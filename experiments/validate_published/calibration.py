"""Calibration rows apart, and the calibrated column (``data/calibration.yaml``).

Two rules of the yardstick (issue 21, "Validation rules"):

- a published row that set a shipped constant, or measures the very quantity a constant is, cannot
  also score the model: it is a *calibration row*, predicted and listed in its own section and
  summary line (:data:`~experiments.validate_published.evaluate.CALIBRATION_SUMMARY`), never in a
  scored category;
- where a source also publishes its own single-device rate, that rate calibrates the source's
  distributed rows in a second, *calibrated* column: one scalar per anchor, compute only. The
  scalar is the anchor's predicted speed over its measured speed (> 1: the simulator computes too
  fast, so every compute kernel is slowed by it); collectives keep their shipped model. A one-GPU
  training step anchors the source's step rows; a source's own largest matmul (a ``matmul`` row)
  anchors the source's other kernel rows on the same device (``matmul`` and ``layer`` rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiments.validate_published.evaluate import CALIBRATION, PREDICTED, RowResult
from experiments.validate_published.kernels import LayerSetup, MatmulSetup
from experiments.validate_published.mapping import RowPlan
from experiments.validate_published.metrics import error_pct, speed_bias_pct
from experiments.validate_published.training import StepSetup
from simcore.errors import TrainsimError
from simcore.yamlload import safe_load

__all__ = [
    "CALIBRATION_PATH",
    "RELATIONS",
    "Anchor",
    "CalibrationTable",
    "ConstantRow",
    "apply_calibration",
    "load_calibration",
]

CALIBRATION_PATH = Path(__file__).parent / "data" / "calibration.yaml"
RELATIONS = ("set_from", "restates")


@dataclass(frozen=True, slots=True)
class ConstantRow:
    """Why a row is a calibration row: the constant it set or restates, and how."""

    constant: str
    relation: str
    reason: str


@dataclass(frozen=True, slots=True)
class Anchor:
    """A source's one-device row and the rows of the same source it calibrates."""

    anchor: int
    rows: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class CalibrationTable:
    """The whole file: calibration rows, rows examined and kept scored, anchors."""

    constant_rows: Mapping[int, ConstantRow]
    independent: Mapping[int, str]
    anchors: tuple[Anchor, ...]


def _ids(value: Any, where: str, known: set[int]) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) for v in value):
        raise TrainsimError(f"{where}: 'rows' must be a non-empty list of row numbers, got {value!r}")
    unknown = sorted(set(value) - known)
    if unknown:
        raise TrainsimError(f"{where}: rows {unknown} are not published rows (1-{max(known)})")
    return tuple(value)


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TrainsimError(f"{where}: {key!r} is required (text)")
    return " ".join(value.split())


def _constant_rows(entries: Any, known: set[int]) -> dict[int, ConstantRow]:
    out: dict[int, ConstantRow] = {}
    for n, entry in enumerate(entries or [], 1):
        where = f"calibration.yaml constant_rows entry {n}"
        relation = entry.get("relation")
        if relation not in RELATIONS:
            raise TrainsimError(f"{where}: relation {relation!r}; allowed: {', '.join(RELATIONS)}")
        row = ConstantRow(_text(entry, "constant", where), relation, _text(entry, "reason", where))
        for i in _ids(entry.get("rows"), where, known):
            if i in out:
                raise TrainsimError(f"{where}: row {i} is listed twice")
            out[i] = row
    return out


_SCALED = (StepSetup, MatmulSetup, LayerSetup)  # setups with a compute_scale


def _family(setup: Any) -> str | None:
    """Which rows an anchor of this setup calibrates: 'step' rows or kernel rows (None: no anchor)."""
    if isinstance(setup, StepSetup):
        return "step" if setup.gpus == 1 else None
    return "kernel" if isinstance(setup, MatmulSetup) else None


def _anchors(entries: Any, plans: Mapping[int, RowPlan]) -> tuple[Anchor, ...]:
    out, seen = [], set()
    for n, entry in enumerate(entries or [], 1):
        where = f"calibration.yaml anchors entry {n}"
        anchor = entry.get("anchor")
        plan = plans.get(anchor) if isinstance(anchor, int) else None
        family = _family(plan.setup) if plan is not None else None
        if plan is None or family is None:
            raise TrainsimError(f"{where}: anchor {anchor!r} must be a one-GPU 'step' row or a 'matmul' row")
        rows = _ids(entry.get("rows"), where, set(plans))
        kinds = (StepSetup,) if family == "step" else (MatmulSetup, LayerSetup)
        wanted = "a 'step' row" if family == "step" else "a 'matmul' or 'layer' row"
        for i in rows:
            if not isinstance(plans[i].setup, kinds) or i in seen or i == anchor:
                raise TrainsimError(f"{where}: row {i} must be {wanted} of one anchor only")
            seen.add(i)
        out.append(Anchor(anchor, rows, _text(entry, "reason", where)))
    return tuple(out)


def load_calibration(plans: Sequence[RowPlan], path: Path = CALIBRATION_PATH) -> CalibrationTable:
    """The table, validated against every row's plan (``plans``: the whole mapping)."""
    with path.open(encoding="utf-8") as handle:
        data = safe_load(handle) or {}
    by_id = {p.row.id: p for p in plans if isinstance(p.row.id, int)}
    known = set(by_id)
    constant = _constant_rows(data.get("constant_rows"), known)
    independent: dict[int, str] = {}
    for n, entry in enumerate(data.get("independent") or [], 1):
        where = f"calibration.yaml independent entry {n}"
        reason = _text(entry, "reason", where)
        for i in _ids(entry.get("rows"), where, known):
            if i in constant or i in independent:
                raise TrainsimError(f"{where}: row {i} is already listed as a calibration or kept row")
            independent[i] = reason
    return CalibrationTable(constant, independent, _anchors(data.get("anchors"), by_id))


def _scale(plan: RowPlan) -> float | None:
    """The anchor's predicted / measured speed, None when the anchor cannot be predicted."""
    if plan.all_reasons() or plan.metric is None or not isinstance(plan.setup, _SCALED):
        return None
    try:
        value = plan.setup.predict(plan.metric.name).value
    except TrainsimError:
        return None
    return 1.0 + speed_bias_pct(plan.metric, value, plan.row.value) / 100.0


def _calibrated(result: RowResult, plan: RowPlan, scale: float, anchor: int) -> RowResult:
    if result.status != PREDICTED or plan.metric is None or not isinstance(plan.setup, _SCALED):
        return result
    value = replace(plan.setup, compute_scale=scale).predict(plan.metric.name).value
    return replace(
        result,
        calibrated=value,
        calibrated_error_pct=error_pct(value, result.measured),
        calibrated_bias_pct=speed_bias_pct(plan.metric, value, result.measured),
        anchor=anchor,
        compute_scale=scale,
    )


def apply_calibration(
    results: Sequence[RowResult], plans: Sequence[RowPlan], table: CalibrationTable
) -> list[RowResult]:
    """``results`` with calibration rows marked and the calibrated column filled in. ``plans`` is
    the whole mapping (an anchor is predicted even when ``--category`` left it out)."""
    by_id = {p.row.id: p for p in plans}
    out = {r.id: r for r in results}
    for anchor in table.anchors:
        wanted = [i for i in (anchor.anchor, *anchor.rows) if i in out]
        scale = _scale(by_id[anchor.anchor]) if wanted else None
        if scale is None:
            continue
        for i in wanted:
            out[i] = _calibrated(out[i], by_id[i], scale, anchor.anchor)
    for i, row in table.constant_rows.items():
        if i in out:
            note = f"calibration row ({row.relation} {row.constant}): {row.reason}"
            out[i] = replace(out[i], role=CALIBRATION, constant=row.constant, notes=(*out[i].notes, note))
    return [out[r.id] for r in results]
