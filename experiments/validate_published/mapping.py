"""The mapping of published rows to simulator setups (``data/mapping.yaml``), validated.

Each entry has common keys (``kind``, ``category``, ``metric``, ``hardware``, ``needs``, ``reason``,
``note``, ``stated_algorithm``) plus its kind's own keys (:data:`KINDS`). A malformed entry is a
:class:`~simcore.errors.TrainsimError` naming the row; a metric whose unit differs from the row's
unit is one too, so a mapping cannot compare numbers in different units.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.validate_published import collective, kernels, training
from experiments.validate_published.args import CATEGORIES
from experiments.validate_published.base import Setup
from experiments.validate_published.metrics import METRICS, Metric
from experiments.validate_published.published import PublishedRow, load_all_rows
from simcore.errors import TrainsimError
from simcore.yamlload import safe_load

__all__ = ["CATEGORIES", "KINDS", "MAPPING_PATH", "Kind", "RowMapping", "RowPlan", "load_mapping", "plan_row"]

MAPPING_PATH = Path(__file__).parent / "data" / "mapping.yaml"

# Report categories, in report order (defined beside the light parser, which lists them in --help).
COMMON_KEYS = ("kind", "category", "metric", "hardware", "needs", "reason", "note", "stated_algorithm")


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of setup: its own entry keys, the metrics it predicts and its parser."""

    keys: tuple[str, ...]
    metrics: tuple[str, ...]
    parse: Callable[[Mapping[str, Any], str, str], Setup]


KINDS: dict[str, Kind] = {
    "collective": Kind(collective.KEYS, collective.METRIC_NAMES, collective.parse),
    "matmul": Kind(kernels.MATMUL_KEYS, kernels.MATMUL_METRICS, kernels.parse_matmul),
    "layer": Kind(kernels.LAYER_KEYS, kernels.LAYER_METRICS, kernels.parse_layer),
    "step": Kind(training.STEP_KEYS, training.STEP_METRICS, training.parse_step),
    "ps": Kind(training.PS_KEYS, training.PS_METRICS, training.parse_ps),
}


@dataclass(frozen=True, slots=True)
class RowPlan:
    """A published row with its setup (None for ``kind: none``) and any fixed reasons."""

    row: PublishedRow
    kind: str
    category: str
    metric: Metric | None
    setup: Setup | None
    reasons: tuple[str, ...]  # the fixed reason and the missing features, in that order
    note: str
    hardware: str
    stated_algorithm: str

    def all_reasons(self) -> list[str]:
        """Why the row cannot be predicted now (empty when it can)."""
        missing = self.setup.missing() if self.setup is not None else []
        return [*missing, *self.reasons]


@dataclass(frozen=True, slots=True)
class RowMapping:
    """The whole mapping: a plan per row, the quick subset and the features not modelled."""

    plans: tuple[RowPlan, ...]
    quick: tuple[int, ...]
    missing_features: Mapping[str, str]


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise TrainsimError(f"{where}: {key!r} must be text, got {value!r}")
    return value


def _needs(entry: Mapping[str, Any], where: str, features: Mapping[str, str]) -> list[str]:
    needs = entry.get("needs", [])
    if not isinstance(needs, list):
        raise TrainsimError(f"{where}: 'needs' must be a list of features")
    for need in needs:
        if need not in features:
            raise TrainsimError(
                f"{where}: feature {need!r} is not in missing_features ({', '.join(features)}); "
                "a modelled feature needs its parameters in the row's setup instead"
            )
    return [features[need] for need in needs]


def plan_row(row: PublishedRow, entry: Any, features: Mapping[str, str]) -> RowPlan:
    where = f"mapping row {row.id}"
    if not isinstance(entry, Mapping):
        raise TrainsimError(f"{where}: expected a mapping, got {entry!r}")
    kind_name = entry.get("kind")
    kind = KINDS.get(str(kind_name))
    if kind is None and kind_name != "none":
        raise TrainsimError(f"{where}: kind {kind_name!r}; allowed: none, {', '.join(KINDS)}")
    allowed = COMMON_KEYS + (kind.keys if kind else ())
    unknown = sorted(k for k in entry if k not in allowed)
    if unknown:
        raise TrainsimError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")
    hardware = _text(entry, "hardware", where)
    setup = kind.parse(entry, where, hardware) if kind else None
    metric = _metric(entry, where, row, kind)
    reasons = [r for r in (_text(entry, "reason", where),) if r] + _needs(entry, where, features)
    if setup is None and not reasons:
        raise TrainsimError(f"{where}: kind none needs a 'reason' or 'needs'")
    category = entry.get("category") or (
        setup.category() if isinstance(setup, collective.CollectiveSetup) else ""
    )
    if category not in CATEGORIES:
        raise TrainsimError(f"{where}: category {category!r}; allowed: {', '.join(CATEGORIES)}")
    return RowPlan(
        row, str(kind_name), category, metric, setup, tuple(reasons), _text(entry, "note", where),
        hardware, _text(entry, "stated_algorithm", where),
    )  # fmt: skip


def _metric(entry: Mapping[str, Any], where: str, row: PublishedRow, kind: Kind | None) -> Metric | None:
    name = entry.get("metric")
    if kind is None:
        return None
    if name not in kind.metrics:
        raise TrainsimError(f"{where}: metric {name!r}; this kind predicts {', '.join(kind.metrics)}")
    metric = METRICS[name]
    if metric.unit != row.unit:
        raise TrainsimError(f"{where}: metric {name} is in {metric.unit}, the row in {row.unit}")
    return metric


@functools.lru_cache(maxsize=2)
def load_mapping(path: Path = MAPPING_PATH) -> RowMapping:
    """Every published row's plan, in row order; every row must have exactly one entry."""
    with path.open(encoding="utf-8") as handle:
        data = safe_load(handle)
    rows = load_all_rows()
    entries = data.get("rows", {})
    ids = {row.id for row in rows}
    if set(entries) != ids:
        extra, lacking = sorted(set(entries) - ids), sorted(ids - set(entries))
        raise TrainsimError(f"{path.name}: rows without an entry {lacking}, entries without a row {extra}")
    features = dict(data.get("missing_features", {}))
    quick = tuple(int(i) for i in data.get("quick", []))
    if not set(quick) <= ids:
        raise TrainsimError(f"{path.name}: quick lists rows that do not exist: {sorted(set(quick) - ids)}")
    plans = tuple(plan_row(row, entries[row.id], features) for row in rows)
    return RowMapping(plans, quick, features)
