"""What every kind of setup shares: the prediction it returns and the helpers that read entries.

A setup (one per published row that names one) is a frozen dataclass built by its kind's
``parse(entry, where)`` from the row's mapping entry. It says what it still lacks
(:meth:`Setup.missing`: presets or device specs the simulator does not have yet, each as a
reason), describes itself in one line for the report, and predicts the row's metric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from simcore.errors import TrainsimError

__all__ = [
    "Prediction",
    "Setup",
    "first_known",
    "missing_name",
    "name_list",
    "positive_int",
    "positive_ints",
]


@dataclass(frozen=True, slots=True)
class Prediction:
    """The simulator's value for a row, the setup it actually ran, and the algorithm it used."""

    value: float
    setup: str
    algorithm: str = ""
    warning: str = ""  # something the simulation flagged (e.g. an out-of-memory verdict)


class Setup(Protocol):
    """A row's simulator setup (see the module docstring)."""

    def missing(self) -> list[str]: ...

    def describe(self) -> str: ...

    def predict(self, metric: str) -> Prediction: ...


def name_list(entry: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> tuple[str, ...]:
    """``entry[key]`` as a tuple of names (a single name or a list; an empty list is allowed)."""
    value = entry.get(key)
    if value is None:
        if required:
            raise TrainsimError(f"{where}: key {key!r} is required (a name or a list of names)")
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise TrainsimError(f"{where}: {key!r} must be a name or a list of names, got {value!r}")
    return tuple(names)


def positive_int(entry: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    """``entry[key]`` as an integer >= 1 (``default`` when absent and one is given)."""
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrainsimError(f"{where}: {key!r} must be an integer >= 1, got {value!r}")
    return value


def positive_ints(entry: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    """``entry[key]`` as a non-empty list of integers >= 1."""
    value = entry.get(key)
    if not isinstance(value, list) or not value:
        raise TrainsimError(f"{where}: {key!r} must be a non-empty list of integers, got {value!r}")
    return tuple(positive_int({key: v}, key, where) for v in value)


# how a block computes attention: the preset's default, FlashAttention-style fused, or eager (the
# scores materialised, scaled, masked, softmaxed and dropped out as separate kernels)
ATTENTION = {"preset": None, "flash": True, "eager": False}


def attention_mode(entry: Mapping[str, Any], where: str) -> str:
    """The entry's ``attention`` (one of :data:`ATTENTION`; ``preset`` when absent)."""
    value = entry.get("attention", "preset")
    if value not in ATTENTION:
        raise TrainsimError(f"{where}: attention {value!r}; allowed: {', '.join(ATTENTION)}")
    return str(value)


def first_known(names: Sequence[str], known: Callable[[], Iterable[str]]) -> str | None:
    """The first of ``names`` that ``known()`` lists, else None."""
    available = set(known())
    return next((name for name in names if name in available), None)


def missing_name(what: str, names: Sequence[str], description: str = "") -> str:
    """The reason for a preset or spec that does not exist yet, with the names the row accepts."""
    detail = f" for {description}" if description else ""
    looked = f" (looked for {' / '.join(repr(n) for n in names)})" if names else ""
    return f"no {what}{detail}{looked}"
