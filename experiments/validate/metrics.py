"""Accuracy metrics of the validation: measured against predicted step times per configuration.

Definitions:

- error of a configuration: ``(predicted - measured) / measured`` (negative: the simulator is too
  fast); MAPE: the mean of ``|error|`` over the configurations that have both numbers.
- strategy order: within each group of configurations that differ only in strategy (same model
  size, world size, network and slow worker), the strategies sorted by measured and by predicted
  step time; Kendall's tau between the two (1: same order) and whether the orders are identical.

:mod:`experiments.validate.report` renders these as tables, markdown and plots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from experiments.validate.grid import STRATEGIES, RunSpec
from experiments.validate.predict import MeasuredRun, Prediction

__all__ = ["GOAL_OVERALL", "GOAL_STRATEGY", "Row", "mape", "strategy_order"]

GOAL_OVERALL, GOAL_STRATEGY = 0.10, 0.15  # MAPE goals: all configurations, each strategy


@dataclass(frozen=True, slots=True)
class Row:
    """One configuration of the comparison."""

    spec: RunSpec
    measured: MeasuredRun | None
    prediction: Prediction | None
    idle_prediction: Prediction | None = None  # the same, ignoring the machine's background load
    plain_prediction: Prediction | None = None  # the same, without the layer-benchmark corrections
    note: str = ""

    @property
    def error(self) -> float | None:
        return _relative_error(self.measured, self.prediction)

    def variant_error(self, variant: str) -> float | None:
        """The error of the main prediction (``""``), the ``"idle"`` or the ``"plain"`` one."""
        chosen = {"": self.prediction, "idle": self.idle_prediction, "plain": self.plain_prediction}[variant]
        return _relative_error(self.measured, chosen)

    def record(self) -> dict[str, Any]:
        spec, m, p = self.spec, self.measured, self.prediction
        phases = m.phases_s if m else {}
        fwd_bwd_opt = sum(phases.get(k, 0.0) for k in ("forward_s", "backward_s", "optimizer_s"))
        return {
            "key": spec.key, "strategy": spec.strategy, "size": spec.size, "world": spec.world,
            "network": spec.network, "bandwidth": spec.bandwidth_label,
            "slow": f"{spec.slow_rank}:{spec.slow_factor:g}" if spec.slow_rank >= 0 else "",
            "measured_ms": _ms(m.step_time_s if m else None),
            "predicted_ms": _ms(p.step_time_s if p else None),
            "error_pct": None if self.error is None else round(100 * self.error, 1),
            "predicted_compute_ms": _ms(p.compute_s if p else None),
            "measured_fwd_bwd_opt_ms": _ms(fwd_bwd_opt) if m and not spec.is_ps else None,
            "background_threads": m.background_threads if m else None,
            "predicted_idle_ms": _ms(self.idle_prediction.step_time_s if self.idle_prediction else None),
            "error_idle_pct": None if (e := self.variant_error("idle")) is None else round(100 * e, 1),
            "note": self.note or (p.note if p else ""),
        }  # fmt: skip


def _relative_error(measured: MeasuredRun | None, prediction: Prediction | None) -> float | None:
    if measured is None or prediction is None or prediction.step_time_s is None:
        return None
    return (prediction.step_time_s - measured.step_time_s) / measured.step_time_s


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1e3 * seconds, 2)


def mape(rows: Sequence[Row], variant: str = "") -> float | None:
    """Mean |error| over rows that have a measurement and a prediction (None if there are none);
    ``variant`` picks another prediction (see :meth:`Row.variant_error`)."""
    errors = [abs(e) for e in (r.variant_error(variant) for r in rows) if e is not None]
    return math.fsum(errors) / len(errors) if errors else None


def strategy_order(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per group of configurations differing only in strategy: measured and predicted orders, tau."""
    from scipy.stats import kendalltau

    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        if row.error is not None:
            s = row.spec
            groups.setdefault((s.size, s.world, s.network, s.bandwidth_label, s.slow_rank), []).append(row)
    result = []
    for key in sorted(groups, key=str):
        members = sorted(groups[key], key=lambda r: STRATEGIES.index(r.spec.strategy))
        if len(members) < 2:
            continue
        measured = [_measured_s(r) for r in members]
        predicted = [_predicted_s(r) for r in members]
        names = [r.spec.strategy for r in members]
        result.append({
            "group": f"{key[0]} w{key[1]} {key[3]}" + (" slow" if key[4] >= 0 else ""),
            "measured_order": [n for _, n in sorted(zip(measured, names, strict=True))],
            "predicted_order": [n for _, n in sorted(zip(predicted, names, strict=True))],
            "kendall_tau": float(kendalltau(measured, predicted).statistic),
        })  # fmt: skip
    return result


def _measured_s(row: Row) -> float:
    return row.measured.step_time_s if row.measured else math.nan


def _predicted_s(row: Row) -> float:
    step = row.prediction.step_time_s if row.prediction else None
    return math.nan if step is None else step
