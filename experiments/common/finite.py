"""No table, JSON record or recommendation is printed from a non-finite number.

A NaN or infinity in a result means the inputs left the range the models hold for (a calibration
profile with a bandwidth of 1e-300 B/s, say) or a bug: either way the command stops with one
``error: internal error`` line naming the field, instead of printing ``nan samples/s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from simcore.errors import TrainsimError

__all__ = ["first_non_finite", "require_finite"]


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


def require_finite(value: Any, what: str) -> None:
    """Raise one clear error if any number in ``value`` is NaN or infinite (``what`` names the result)."""
    found = first_non_finite(value)
    if found is not None:
        field, number = found
        raise TrainsimError(
            f"internal error: {what} has a non-finite {field} ({number}); nothing printed. "
            "The inputs are probably outside what the model holds for (check --calibration and sizes)"
        )
