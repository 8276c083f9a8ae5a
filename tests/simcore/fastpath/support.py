"""What the fast path's exactness tests share: two step reports compared field by field."""

from __future__ import annotations

import math

from simcore.report import StepReport

__all__ = ["assert_same_report"]


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
