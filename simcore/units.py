"""Units: SI inside (seconds, bytes, bytes/s, FLOP/s); strings are parsed once, at the boundary.

Conventions (as nccl-tests and vendors' datasheets use them):
- ``GB`` = 1e9 bytes, ``GiB`` = 2**30 bytes; a bare ``G`` in a *size* is 2**30, as nccl-tests'
  ``-b 8 -e 1G`` means (its parser multiplies K/M/G by 1024).
- bandwidth: ``900GB/s`` = 9e11 B/s; ``100Gbit/s``, ``100Gb/s`` and ``100Gbps`` = 1.25e10 B/s.
- time: ``2us``/``2µs`` = 2e-6 s; ``ns``, ``ms``, ``s``.
"""

from __future__ import annotations

import math
import re

from simcore.errors import TrainsimError

__all__ = [
    "UnitError",
    "format_bandwidth",
    "format_bytes",
    "format_time",
    "parse_bandwidth",
    "parse_flops",
    "parse_size",
    "parse_time",
]


class UnitError(TrainsimError):
    """A quantity string that cannot be parsed, or a value outside what is allowed."""


_NUMBER = r"(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"

_SIZE_FACTORS = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_BYTE_RATE = {
    "b/s": 1,
    "kb/s": 1e3,
    "mb/s": 1e6,
    "gb/s": 1e9,
    "tb/s": 1e12,
    "kib/s": 1024,
    "mib/s": 1024**2,
    "gib/s": 1024**3,
    "bps": 1,
}
_BIT_RATE = {
    "bit/s": 1,
    "kbit/s": 1e3,
    "mbit/s": 1e6,
    "gbit/s": 1e9,
    "tbit/s": 1e12,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
    "tbps": 1e12,
}
# Case matters for bits vs bytes: "Gb/s" is gigabits (network convention), "GB/s" gigabytes.
_CASED_BIT_RATE = {"Kb/s": 1e3, "Mb/s": 1e6, "Gb/s": 1e9, "Tb/s": 1e12}

_TIME_FACTORS = {
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
    "ps": 1e-12,
}

_FLOP_FACTORS = {
    "flop/s": 1,
    "flops": 1,
    "gflop/s": 1e9,
    "gflops": 1e9,
    "tflop/s": 1e12,
    "tflops": 1e12,
    "pflop/s": 1e15,
    "pflops": 1e15,
}


def _split(text: str | float | int, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"{what}: expected a number with a unit, got {text!r}")
    if isinstance(text, (int, float)):
        return float(text), ""
    match = re.fullmatch(_NUMBER + r"\s*(?P<unit>\S*)", str(text).strip())
    if not match:
        raise UnitError(f"{what}: cannot parse {text!r}; expected a number and a unit, e.g. '25MiB'")
    return float(match["num"]), match["unit"]


def _checked(value: float, text: object, what: str, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "greater than zero"
        raise UnitError(f"{what}: {text!r} is not allowed; it must be finite and {bound}")
    return value


def parse_size(text: str | float | int, *, allow_zero: bool = True) -> int:
    """Bytes from ``'25MiB'``, ``'1G'`` (2**30, as nccl-tests), ``'8'``, ``'4GB'`` (4e9) or a number."""
    num, unit = _split(text, "size")
    factor = _SIZE_FACTORS.get(unit.lower())
    if factor is None:
        raise UnitError(f"size: unknown unit {unit!r} in {text!r}; use B, K, M, G, KiB, MiB, GiB, KB, MB, GB")
    return round(_checked(num * factor, text, "size", allow_zero))


def parse_bandwidth(text: str | float | int) -> float:
    """Bytes per second from ``'900GB/s'``, ``'100Gbit/s'``, ``'200Gb/s'``, ``'25Gbps'`` or a number (B/s)."""
    num, unit = _split(text, "bandwidth")
    if unit == "":
        factor: float = 1.0
    elif unit in _CASED_BIT_RATE:
        factor = _CASED_BIT_RATE[unit] / 8
    elif unit.lower() in _BIT_RATE:
        factor = _BIT_RATE[unit.lower()] / 8
    elif unit.lower() in _BYTE_RATE:
        factor = _BYTE_RATE[unit.lower()]
    else:
        raise UnitError(
            f"bandwidth: unknown unit {unit!r} in {text!r}; use GB/s (bytes) or Gbit/s, Gb/s, Gbps (bits)"
        )
    return _checked(num * factor, text, "bandwidth", allow_zero=False)


def parse_time(text: str | float | int, *, allow_zero: bool = True) -> float:
    """Seconds from ``'2us'``, ``'1.5ms'``, ``'300ns'``, ``'2s'`` or a number (seconds)."""
    num, unit = _split(text, "time")
    factor = 1.0 if unit == "" else _TIME_FACTORS.get(unit.lower(), _TIME_FACTORS.get(unit))
    if factor is None:
        raise UnitError(f"time: unknown unit {unit!r} in {text!r}; use s, ms, us, ns")
    return _checked(num * factor, text, "time", allow_zero)


def parse_flops(text: str | float | int) -> float:
    """FLOP/s from ``'312TFLOP/s'``, ``'19.5 TFLOPS'`` or a number."""
    num, unit = _split(text, "compute rate")
    factor = 1.0 if unit == "" else _FLOP_FACTORS.get(unit.lower())
    if factor is None:
        raise UnitError(f"compute rate: unknown unit {unit!r} in {text!r}; use TFLOP/s, GFLOP/s, FLOP/s")
    return _checked(num * factor, text, "compute rate", allow_zero=False)


def format_bytes(n: float) -> str:
    """``1073741824`` -> ``'1.00 GiB'`` (binary prefixes, as memory is reported)."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n:.0f} B"


def format_bandwidth(bps: float) -> str:
    """``9e11`` -> ``'900.0 GB/s'`` (decimal, as nccl-tests and datasheets)."""
    return f"{bps / 1e9:.1f} GB/s"


def format_time(seconds: float) -> str:
    """A duration with a readable unit: ``'1.23 ms'``."""
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
