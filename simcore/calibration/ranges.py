"""Physical ranges of calibrated numbers, from ``simcore/data/calibration_ranges.yaml``.

Every number a calibration profile carries (bandwidths, latencies, FLOP/s, slowdowns, per-operator
costs, rank and thread counts) must be finite and inside its range to be used: a profile holding
``busbw_Bps: 1e-300`` would otherwise turn into infinite step times. The data file gives each range
its reason; the error repeats both.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from simcore.calibration.profile import ProfileError
from simcore.data import data_file

__all__ = ["DATA_FILE", "PhysicalRange", "physical_range"]

DATA_FILE = "simcore/data/calibration_ranges.yaml"


@dataclass(frozen=True, slots=True)
class PhysicalRange:
    """Where a calibrated quantity can physically lie, and why."""

    name: str
    low: float
    high: float
    unit: str
    source: str

    def check(self, value: float, where: str) -> float:
        """``value`` if finite and within the range; ProfileError naming range and source otherwise."""
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise ProfileError(
                f"{where}: {value:g} {self.unit} is outside the physical range {self.low:g} .. {self.high:g} "
                f"{self.unit} ({self.source}; {DATA_FILE})"
            )
        return value


def _parse(name: str, entry: Any) -> PhysicalRange:
    if not isinstance(entry, dict) or set(entry) != {"min", "max", "unit", "source"}:
        raise ProfileError(f"{DATA_FILE}: {name} needs exactly min, max, unit and source")
    low, high = float(entry["min"]), float(entry["max"])
    if not low <= high:
        raise ProfileError(f"{DATA_FILE}: {name}: min {low:g} is above max {high:g}")
    return PhysicalRange(name, low, high, str(entry["unit"]), " ".join(str(entry["source"]).split()))


@functools.cache
def _ranges() -> dict[str, PhysicalRange]:
    data = data_file("calibration_ranges.yaml")
    return {str(name): _parse(str(name), entry) for name, entry in data.items()}


def physical_range(name: str) -> PhysicalRange:
    """The range called ``name`` (``bandwidth_Bps``, ``latency_s``, ``peak_flops``, ...)."""
    ranges = _ranges()
    if name not in ranges:
        raise KeyError(f"no physical range {name!r} in {DATA_FILE}; known: {', '.join(ranges)}")
    return ranges[name]
