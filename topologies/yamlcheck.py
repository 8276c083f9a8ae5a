"""Strict reading of YAML mappings: unknown or missing keys fail naming the file and the key.

Also the brace expansion used in node-type files: ``gpu{0..7}`` is ``gpu0 ... gpu7`` and
``pcie{0,0,1,1}`` is ``pcie0 pcie0 pcie1 pcie1`` (so links can pair devices element by element),
bounded before it is expanded; and typed, length-bounded reading of names and free text.
Files are read through :mod:`simcore.inputs` (size bound, encoding sniffing, no alias bombs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from simcore import inputs
from simcore.errors import TrainsimError
from simcore.limits import DEVICES_PER_NODE, NAME_LENGTH, TEXT_LENGTH, Bound, check_physical

__all__ = [
    "SpecError",
    "check_bound",
    "expand_braces",
    "mapping",
    "name_field",
    "parse_quantity",
    "physical_quantity",
    "read_text_file",
    "read_yaml",
    "shown",
    "text_field",
]

T = TypeVar("T")
_BRACE = re.compile(r"\{([^{}]*)\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SpecError(TrainsimError):
    """A cluster spec (preset, user YAML, capture) that is malformed: says where and what is allowed."""


def read_text_file(path: Path | str, what: str = "a text file") -> str:
    """The text in ``path`` (see :func:`simcore.inputs.read_text`); a :class:`SpecError` naming the file."""
    try:
        return inputs.read_text(path, what)
    except TrainsimError as exc:
        raise SpecError(str(exc)) from None


def read_yaml(path: Path | str, what: str = "a cluster spec (YAML)") -> Any:
    """The YAML document in ``path``, without alias bombs; a :class:`SpecError` naming the file."""
    try:
        return inputs.read_yaml(path, what)
    except TrainsimError as exc:
        raise SpecError(str(exc)) from None


def text_field(value: Any, where: str, default: str = "") -> str:
    """Free text (a description, a source): a string of bounded length; numbers read as text."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SpecError(f"{where}: expected text, got {_kind(value)} (quote it if it is meant as text)")
    text = str(value)
    check_bound(TEXT_LENGTH, len(text), where)
    return text


def name_field(value: Any, where: str) -> str:
    """A name (device, node type, link class): short text on one line."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SpecError(f"{where}: a name must be text, got {_kind(value)}")
    text = str(value)
    check_bound(NAME_LENGTH, len(text), where)
    if not text.strip() or _CONTROL.search(text):
        raise SpecError(f"{where}: name {text!r} is empty or holds control characters")
    return text


def check_bound(bound: Bound, count: int, where: str, subject: str = "") -> int:
    """``bound.check`` raising :class:`SpecError` (see :class:`simcore.limits.Bound`)."""
    try:
        return bound.check(count, where, subject)
    except TrainsimError as exc:
        raise SpecError(str(exc)) from None


def shown(value: Any, most: int = 60) -> str:
    """``repr(value)`` cut to ``most`` characters, for echoing user input in an error line."""
    if isinstance(value, dict | list) and len(value) > 8:
        return f"<{_kind(value)} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= most else text[: most - 4] + "..." + text[-1]


def _kind(value: Any) -> str:
    names = {bool: "true/false", dict: "a mapping", list: "a list", type(None): "nothing"}
    return names.get(type(value), type(value).__name__)


def mapping(
    value: Any, where: str, required: Iterable[str] = (), optional: Iterable[str] = ()
) -> dict[str, Any]:
    """``value`` as a dict with only the allowed keys and all the required ones."""
    required, optional = tuple(required), tuple(optional)
    allowed = required + optional
    if not isinstance(value, dict):
        raise SpecError(
            f"{where}: expected a mapping with keys {', '.join(allowed)}; got {type(value).__name__}"
        )
    for key in value:
        if key not in allowed:
            raise SpecError(f"{where}: unknown key {shown(key)}; allowed: {', '.join(allowed)}")
    for key in required:
        if key not in value:
            raise SpecError(f"{where}: missing key {key!r}; required: {', '.join(required)}")
    return value


def parse_quantity(parse: Callable[[Any], T], value: Any, where: str) -> T:
    """``parse(value)`` with the location prefixed to any unit error."""
    if isinstance(value, str):
        check_bound(NAME_LENGTH, len(value), where)
    try:
        return parse(value)
    except TrainsimError as exc:
        raise SpecError(f"{where}: {exc}") from None


def physical_quantity(parse: Callable[[Any], float], value: Any, where: str, quantity: str) -> float:
    """``parse(value)`` checked against the physical range ``quantity`` (:mod:`simcore.limits`)."""
    number = parse_quantity(parse, value, where)
    try:
        return check_physical(quantity, number, where, value)
    except TrainsimError as exc:
        raise SpecError(str(exc)) from None


def expand_braces(pattern: str, where: str, bound: Bound = DEVICES_PER_NODE) -> list[str]:
    """All names a pattern stands for, in order (at most one brace group, at most ``bound`` names).

    A range is measured from its end points before anything is listed.
    """
    pattern = name_field(pattern, where)
    groups = _BRACE.findall(pattern)
    if not groups:
        return [pattern]
    if len(groups) > 1:
        raise SpecError(f"{where}: {pattern!r} has more than one {{...}} group; use one, e.g. 'gpu{{0..7}}'")
    body = groups[0]
    range_match = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", body)
    if range_match:
        lo, hi = int(range_match[1]), int(range_match[2])
        if hi < lo:
            raise SpecError(f"{where}: empty range in {pattern!r}")
        check_bound(bound, hi - lo + 1, where, repr(pattern))
        items = [str(i) for i in range(lo, hi + 1)]
    else:
        items = [item.strip() for item in body.split(",")]
        if not all(items):
            raise SpecError(f"{where}: empty item in {pattern!r}; write 'name{{0..3}}' or 'name{{0,1}}'")
        check_bound(bound, len(items), where, repr(pattern))
    head, tail = pattern.split("{", 1)[0], pattern.split("}", 1)[1]
    return [f"{head}{item}{tail}" for item in items]
