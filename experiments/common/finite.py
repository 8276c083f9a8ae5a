"""No table, JSON record or recommendation is printed from a non-finite number.

A NaN or infinity in a result means the inputs left the range the models hold for (a calibration
profile with a bandwidth of 1e-300 B/s, say) or a bug: either way the command stops with one
``error: internal error`` line naming the field, instead of printing ``nan samples/s``.
"""

from __future__ import annotations

from typing import Any

from simcore.errors import TrainsimError
from simcore.report_checks import first_non_finite

__all__ = ["first_non_finite", "require_finite"]


def require_finite(value: Any, what: str) -> None:
    """Raise one clear error if any number in ``value`` is NaN or infinite (``what`` names the result)."""
    found = first_non_finite(value)
    if found is not None:
        field, number = found
        raise TrainsimError(
            f"internal error: {what} has a non-finite {field} ({number}); nothing printed. "
            "The inputs are probably outside what the model holds for (check --calibration and sizes)"
        )
