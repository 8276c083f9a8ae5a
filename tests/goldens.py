"""Golden files: a test's output compared with the copy stored under ``tests/golden/``.

``assert_golden(name, text)`` fails with a unified diff (stored golden first, this run's output
second) when the two differ. After an intended change, regenerate the goldens by running the tests
with ``TRAINSIM_UPDATE_GOLDEN=1``: each golden is then rewritten with the current output.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["GOLDEN_DIR", "UPDATE_ENV", "assert_golden", "updating"]

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "TRAINSIM_UPDATE_GOLDEN"
_DIFF_LINES = 60  # a longer diff is cut after this many lines: its start says enough


def updating() -> bool:
    """Whether this run rewrites the goldens instead of checking them (``TRAINSIM_UPDATE_GOLDEN=1``)."""
    return os.environ.get(UPDATE_ENV) == "1"


def assert_golden(name: str, text: str, *, same: Callable[[str, str], bool] | None = None) -> None:
    """Fail unless ``text`` matches the golden file ``tests/golden/<name>``.

    ``same(text, expected)`` decides a match when exact equality is too strict (e.g. JSON whose
    floats may differ in the last bit); by default the two must be equal character for character.
    """
    path = GOLDEN_DIR / name
    if updating():
        path.write_text(text, encoding="utf-8")
    if not path.exists():
        raise AssertionError(f"missing golden {path.name}; create it with {UPDATE_ENV}=1")
    expected = path.read_text(encoding="utf-8")
    matches = text == expected if same is None else same(text, expected)
    if matches:
        return
    diff = list(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"golden/{name}",
            tofile="this run",
        )
    )
    shown = "".join(diff[:_DIFF_LINES]) or "(the lines are equal; the texts differ in line endings)\n"
    more = f"... ({len(diff) - _DIFF_LINES} more diff lines)\n" if len(diff) > _DIFF_LINES else ""
    raise AssertionError(f"output differs from golden/{name} ({UPDATE_ENV}=1 rewrites it):\n{shown}{more}")
