"""Model families as formulas: transformers by their shape, CNNs as layer lists built op by op.

Each builder returns plain :class:`simcore.workload.types.Layer` records; :mod:`simcore.workload.loader` wraps
them into a :class:`~simcore.workload.types.Workload` and holds the preset registry
(``simcore/workload/models/presets.yaml``). The helpers here validate user-written mappings strictly: an
unknown key, a missing key or a non-positive number is a :class:`~simcore.errors.TrainsimError`
naming where it happened and what is allowed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from simcore.errors import TrainsimError
from simcore.limits import MODEL_DIMENSION

__all__ = ["check_keys", "get_bool", "get_choice", "get_nonnegative_int", "get_positive_int"]


def check_keys(
    mapping: object, required: Iterable[str], optional: Iterable[str], where: str
) -> Mapping[str, Any]:
    """``mapping`` as a mapping with every required key and no unknown key."""
    required, optional = tuple(required), tuple(optional)
    allowed = ", ".join(required + optional) or "none (it takes no keys)"  # never an empty list
    if not isinstance(mapping, Mapping):
        raise TrainsimError(f"{where}: expected a mapping with keys {allowed}, got {type(mapping).__name__}")
    unknown = [key for key in mapping if key not in required and key not in optional]
    if unknown:
        raise TrainsimError(f"{where}: unknown key {_shown(unknown[0])}; allowed keys: {allowed}")
    missing = [key for key in required if key not in mapping]
    if missing:
        raise TrainsimError(f"{where}: missing key {missing[0]!r}; required keys: {', '.join(required)}")
    return mapping


def get_positive_int(mapping: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    """``mapping[key]`` as a positive integer (``default`` when absent and a default is given),
    at most :data:`simcore.limits.MODEL_DIMENSION`."""
    value = mapping.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TrainsimError(f"{where}: key {key!r} must be a positive integer, got {_shown(value)}")
    MODEL_DIMENSION.check_each(value, where, f"key {key!r}")
    return value


def get_nonnegative_int(mapping: Mapping[str, Any], key: str, where: str, default: int) -> int:
    """``mapping[key]`` as an integer >= 0 (``default`` when absent), at most the model bound."""
    value = mapping.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TrainsimError(f"{where}: key {key!r} must be an integer >= 0, got {_shown(value)}")
    MODEL_DIMENSION.check_each(value, where, f"key {key!r}")
    return value


def _shown(value: object) -> str:
    """``repr(value)`` cut short enough for one error line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:55] + "..."


def get_bool(mapping: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    """``mapping[key]`` as a boolean (``default`` when absent)."""
    value = mapping.get(key, default)
    if not isinstance(value, bool):
        raise TrainsimError(f"{where}: key {key!r} must be true or false, got {_shown(value)}")
    return value


def get_choice(
    mapping: Mapping[str, Any], key: str, where: str, choices: tuple[str, ...], default: str
) -> str:
    """``mapping[key]`` as one of ``choices`` (``default`` when absent)."""
    value = mapping.get(key, default)
    if not isinstance(value, str) or value not in choices:
        raise TrainsimError(f"{where}: key {key!r} must be one of {', '.join(choices)}; got {_shown(value)}")
    return str(value)
