"""Answers no model of a training step may give: a record carrying one is a bug, never an answer.

A step record (:class:`simcore.report.StepReport` or its ``to_record()`` mapping) is physically
impossible when

- a number in it is NaN or infinite;
- a time (``*_s``) or a size (``*_bytes``) is negative;
- ``mfu`` exceeds 1: the GPUs did more model FLOPs than their datasheet peak allows;
- its compute ran faster than its FLOPs at peak: ``compute_s < mfu * step_time_s``, i.e.
  ``model FLOPs / (gpus * peak) > compute_s`` (the model FLOPs of the MFU numerator are all done
  inside compute, spread over the GPUs);
- ``scaling_efficiency`` exceeds 1: N GPUs more than N times as fast as one running the same
  strategy on the same global batch (every per-step cost of the one-GPU baseline is there at N
  GPUs or divided by N, never less). With jitter the efficiency is a ratio of two medians of a few
  random steps; it may exceed 1 by the record's own spread (``step_time_p99_s / step_time_s - 1``).
  Under weak scaling (a fixed batch per GPU, the what-if's ``--batch-per-gpu``) the baseline is one
  GPU running that smaller batch: it pays the whole optimizer update and every unsharded state pass
  per step, which a sharded strategy divides by N, so weak-scaling efficiency may exceed 1 and is
  not bounded here.

Each bound allows :data:`RELATIVE_SLACK` for floating-point rounding. :func:`check_records` raises
:class:`simcore.errors.InternalError` (``internal error: ..., please report`` and exit status 70
under :func:`simcore.errors.cli_entry`) at the first such record; the CLIs call it once on what
they are about to print.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from simcore.errors import InternalError

__all__ = ["RELATIVE_SLACK", "check_records", "first_non_finite", "impossibility"]

RELATIVE_SLACK = 1e-6  # rounding of sums of many float64 terms stays far below this


def _as_mapping(record: Any) -> Mapping[str, Any]:
    if isinstance(record, Mapping):
        return record
    if is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in fields(record)}
    raise TypeError(f"not a step record: {type(record).__name__}")


def first_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first (field path, value) in ``value`` (numbers, mappings, lists) that is NaN or infinite."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "value", value)
    if isinstance(value, Mapping):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{_name(v, i)}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, inner in items:
        found = first_non_finite(inner, where)
        if found is not None:
            return found
    return None


def _name(item: Any, index: int) -> str:
    """A record's name in an error: its strategy and cluster where it has them, else its index."""
    if isinstance(item, Mapping) and "strategy" in item:
        where = f" on {item['cluster']}" if item.get("cluster") else ""
        gpus = f" at {item['gpus']} GPUs" if item.get("gpus") else ""
        return f"{item['strategy']}{where}{gpus}"
    return str(index)


def _number(record: Mapping[str, Any], name: str) -> float | None:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def impossibility(record: Any, *, weak_scaling: bool = False) -> str | None:
    """What makes ``record`` physically impossible (one phrase), or None when it is possible."""
    data = _as_mapping(record)
    for name, value in data.items():
        found = first_non_finite(value, name)
        if found is not None:
            return f"{found[0]} is {found[1]}"
        number = _number(data, name)
        if number is not None and name.endswith(("_s", "_bytes")) and number < 0.0:
            return f"{name} is negative ({number:g})"
    mfu, step, compute = (_number(data, name) for name in ("mfu", "step_time_s", "compute_s"))
    if mfu is not None and mfu > 1.0 + RELATIVE_SLACK:
        return f"mfu {mfu:.4g} > 1"
    if mfu is not None and step is not None and compute is not None:
        floor = mfu * step  # model FLOPs / (gpus x peak FLOP/s): the fastest compute could be
        if compute < floor * (1.0 - RELATIVE_SLACK):
            return f"compute_s {compute:.6g} is below model FLOPs / peak ({floor:.6g} s)"
    efficiency = _number(data, "scaling_efficiency")
    if (
        efficiency is not None
        and not weak_scaling
        and efficiency > 1.0 + RELATIVE_SLACK + _sampling_spread(data)
    ):
        return f"scaling_efficiency {efficiency:.6g} > 1"
    return None


def _sampling_spread(data: Mapping[str, Any]) -> float:
    """How far a median of randomly slowed steps (jitter) may sit from the one of the one-GPU baseline
    by chance: the record's own p99 / p50 - 1 (0 for deterministic steps). Scaling efficiency compares
    two such medians; a few jittered steps can put the N-GPU one below its expectation."""
    p50, p99 = _number(data, "step_time_s"), _number(data, "step_time_p99_s")
    if p50 is None or p99 is None or p50 <= 0.0:
        return 0.0
    return max(0.0, p99 / p50 - 1.0)


def _point(data: Mapping[str, Any]) -> str:
    parts = [str(data[key]) for key in ("model", "strategy", "layout", "cluster") if data.get(key)]
    gpus = f" at {data['gpus']} GPUs" if data.get("gpus") else ""
    return " ".join(parts) + gpus


def check_records(records: Iterable[Any], what: str, *, weak_scaling: bool = False) -> None:
    """Raise :class:`InternalError` at the first physically impossible record of ``what`` (e.g.
    ``"the what-if"``): nothing of it may be printed. ``weak_scaling``: the records' scaling
    efficiency is against one GPU running the per-GPU batch (not bounded by 1)."""
    for record in records:
        found = impossibility(record, weak_scaling=weak_scaling)
        if found is not None:
            raise InternalError(
                f"{what} produced an impossible record ({_point(_as_mapping(record))}: {found})"
            )
