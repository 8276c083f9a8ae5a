"""Sustained clocks under a board power limit below the device's default (``data/power.yaml``).

The GEMM and attention plateaus of ``efficiency.yaml`` are sustained rates at the device's default
power limit, so the default limit changes nothing. Under a lower limit ``L`` a kernel that drew
``draw`` watts at the default runs at the clock ratio

    ((L - static) / (draw - static)) ** (1 / dvfs_exponent)      (1 when L >= draw)

(CMOS dynamic power ~ f V^2 with V rising with f: ~ f^3; the static share does not scale).
Compute-bound kernels draw the default limit (power-limited GEMMs); memory-bound kernels draw
``memory_bound_draw_w`` and slow only below it. :func:`power_capped` returns the device with its
peak FLOP/s and memory bandwidth scaled so, which every rule of the roofline then uses as is.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from simcore.data import data_file
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.hardware import DeviceSpec

__all__ = [
    "PowerSpec",
    "capped_clock_ratio",
    "check_power_limit",
    "power_capped",
    "power_spec",
    "settable_range_w",
]

_DATA_FILE = Path(__file__).parent.parent / "data" / "power.yaml"
_KEYS = ("default_w", "min_w", "max_w", "static_w", "memory_bound_draw_w", "source")


@dataclass(frozen=True, slots=True)
class PowerSpec:
    """One device's board power figures (watts) and their source."""

    default_w: float
    min_w: float
    max_w: float
    static_w: float
    memory_bound_draw_w: float
    source: str


@functools.lru_cache(maxsize=1)
def _table() -> tuple[float, dict[str, PowerSpec]]:
    data = data_file(_DATA_FILE.name)
    specs: dict[str, PowerSpec] = {}
    for name, entry in data["devices"].items():
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise TrainsimError(
                f"power.yaml: {name}.{unknown[0]} is not a known key; allowed: {', '.join(_KEYS)}"
            )
        watts = {k: float(entry[k]) for k in _KEYS[:-1]}
        spec = PowerSpec(**watts, source=str(entry["source"]))
        if not spec.static_w < spec.min_w <= spec.default_w <= spec.max_w:
            raise TrainsimError(f"power.yaml: {name} needs static_w < min_w <= default_w <= max_w")
        specs[str(name)] = spec
    return float(data["dvfs_exponent"]), specs


def power_spec(device: str) -> PowerSpec | None:
    """The power figures of ``device`` (None: the device has none in ``power.yaml``)."""
    return _table()[1].get(device)


def settable_range_w() -> tuple[float, float]:
    """The lowest and highest limit any device of ``power.yaml`` accepts (each device checks its own)."""
    specs = _table()[1].values()
    return min(s.min_w for s in specs), max(s.max_w for s in specs)


def check_power_limit(device: str, limit_w: float) -> PowerSpec:
    """``device``'s power figures, once ``limit_w`` is within the range it can be set to."""
    spec = power_spec(device)
    if spec is None:
        known = ", ".join(_table()[1])
        raise TrainsimError(f"--power-limit: device {device!r} has no power data; allowed on: {known}")
    if not (math.isfinite(limit_w) and spec.min_w <= limit_w <= spec.max_w):
        raise TrainsimError(
            f"--power-limit {limit_w:g} W is outside {device}'s settable range "
            f"{spec.min_w:g}..{spec.max_w:g} W (default {spec.default_w:g} W)"
        )
    return spec


def capped_clock_ratio(spec: PowerSpec, limit_w: float, draw_w: float) -> float:
    """Clock under ``limit_w`` over the clock at the default limit, for a kernel drawing ``draw_w``."""
    if limit_w >= draw_w:
        return 1.0
    exponent = _table()[0]
    return float(((limit_w - spec.static_w) / (draw_w - spec.static_w)) ** (1.0 / exponent))


def power_capped(device: DeviceSpec, limit_w: float | None) -> DeviceSpec:
    """``device`` under a board power limit of ``limit_w`` watts (None: as it is, at its default).

    Peak FLOP/s (tensor and CUDA cores: the SM clock) scale by the compute-bound clock ratio, memory
    bandwidth by the memory-bound one; the name stays, so efficiency tables still apply.
    """
    if limit_w is None:
        return device
    spec = check_power_limit(device.name, limit_w)
    compute = capped_clock_ratio(spec, limit_w, spec.default_w)
    memory = capped_clock_ratio(spec, limit_w, spec.memory_bound_draw_w)
    if compute == 1.0 and memory == 1.0:
        return device
    return replace(
        device,
        peak_flops=MappingProxyType({k: v * compute for k, v in device.peak_flops.items()}),
        memory_bandwidth_Bps=device.memory_bandwidth_Bps * memory,
    )
