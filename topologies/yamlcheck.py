"""Strict reading of YAML mappings: unknown or missing keys fail naming the file and the key.

Also the brace expansion used in node-type files: ``gpu{0..7}`` is ``gpu0 ... gpu7`` and
``pcie{0,0,1,1}`` is ``pcie0 pcie0 pcie1 pcie1`` (so links can pair devices element by element).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from simcore.errors import TrainsimError

__all__ = ["SpecError", "expand_braces", "mapping", "parse_quantity", "read_text_file", "read_yaml"]

T = TypeVar("T")
_BRACE = re.compile(r"\{([^{}]*)\}")


class SpecError(TrainsimError):
    """A cluster spec (preset, user YAML, capture) that is malformed: says where and what is allowed."""


def read_text_file(path: Path | str) -> str:
    """The UTF-8 text in ``path``; a :class:`SpecError` naming the file if it is missing or unreadable."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read as text: {exc}") from None


def read_yaml(path: Path | str) -> Any:
    """The YAML document in ``path``; a :class:`SpecError` naming the file if it does not parse."""
    path = Path(path)
    text = read_text_file(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpecError(f"{path}: not valid YAML{line}: {getattr(exc, 'problem', exc)}") from None


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
            raise SpecError(f"{where}: unknown key {key!r}; allowed: {', '.join(allowed)}")
    for key in required:
        if key not in value:
            raise SpecError(f"{where}: missing key {key!r}; required: {', '.join(required)}")
    return value


def parse_quantity(parse: Callable[[Any], T], value: Any, where: str) -> T:
    """``parse(value)`` with the location prefixed to any unit error."""
    try:
        return parse(value)
    except TrainsimError as exc:
        raise SpecError(f"{where}: {exc}") from None


def expand_braces(pattern: str, where: str) -> list[str]:
    """All names a pattern stands for, in order (at most one brace group)."""
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
        items = [str(i) for i in range(lo, hi + 1)]
    else:
        items = [item.strip() for item in body.split(",")]
        if not all(items):
            raise SpecError(f"{where}: empty item in {pattern!r}; write 'name{{0..3}}' or 'name{{0,1}}'")
    head, tail = pattern.split("{", 1)[0], pattern.split("}", 1)[1]
    return [f"{head}{item}{tail}" for item in items]
