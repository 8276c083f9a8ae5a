"""What the fast path's exactness tests share: two step reports compared field by field."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from simcore.report import StepReport
from simcore.step import plan as schedule

__all__ = ["assert_renamed_report", "assert_same_report", "rename_labels"]


def rename_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render every group and micro-batch in labels another way: ``u3``, ``b0``, `` #2``."""
    monkeypatch.setattr(schedule, "group_label", lambda word, group: f"{word[0]}{group}")
    monkeypatch.setattr(schedule, "micro_batch_label", lambda micro: "" if micro is None else f" #{micro}")


def _renamed(text: str) -> str:
    """``text`` as :func:`rename_labels` would have rendered it."""
    text = re.sub(r"\b(unit|bucket) (\d+)", lambda m: f"{m[1][0]}{m[2]}", text)
    return re.sub(r" \[micro-batch (\d+)\]", r" #\1", text)


def assert_renamed_report(got: StepReport, want: StepReport) -> None:
    """``got`` is ``want`` with its labels renamed (:func:`rename_labels`), and nothing else changed."""
    assert got.peak_phase == _renamed(want.peak_phase)
    assert got.oom_verdict == _renamed(want.oom_verdict)
    assert_same_report(got, replace(want, peak_phase=got.peak_phase, oom_verdict=got.oom_verdict))


def assert_same_report(got: StepReport, want: StepReport) -> None:
    """Every field of ``got`` equals ``want``'s; numbers (also inside dicts) to 1e-9 relative."""
    for key, expected in want.to_record().items():
        value = got.to_record()[key]
        if isinstance(expected, float):
            assert math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-12), key
        elif isinstance(expected, dict):
            assert value.keys() == expected.keys(), key
            assert all(math.isclose(value[q], expected[q], rel_tol=1e-9, abs_tol=1e-12) for q in value), key
        else:
            assert value == expected, key
