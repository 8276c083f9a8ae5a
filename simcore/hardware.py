"""Device specs: what one GPU (or CPU rank) can compute and hold, read from ``data/devices.yaml``.

A :class:`DeviceSpec` is the datasheet view of a device: dense peak FLOP/s per dtype, memory
capacity and memory bandwidth. Achieved rates come from a calibration profile; these peaks are
the roofline's ceiling. Every entry in the data file names the document its figures come from.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

from simcore.errors import TrainsimError
from simcore.inputs import load_yaml
from simcore.limits import NAME_LENGTH, TEXT_LENGTH, check_physical
from simcore.units import parse_bandwidth, parse_flops, parse_size

__all__ = ["DEVICE_KINDS", "DTYPES", "DeviceSpec", "device_names", "device_spec", "load_device_specs"]

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
DEVICE_KINDS = ("gpu", "cpu")
_ENTRY_KEYS = ("kind", "memory", "memory_bandwidth", "peak_flops", "source")
_DATA_FILE = "devices.yaml"


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device model as its datasheet describes it (dense peaks, no sparsity)."""

    name: str
    kind: str
    memory_bytes: int
    memory_bandwidth_Bps: float
    peak_flops: Mapping[str, float]
    source: str

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; a :class:`TrainsimError` if the device lacks it."""
        rate = self.peak_flops.get(dtype)
        if rate is None:
            raise TrainsimError(
                f"device {self.name!r} has no {dtype!r} rate; allowed: {', '.join(self.peak_flops)}"
            )
        return rate


def _parse_entry(name: str, entry: Any, where: str) -> DeviceSpec:
    if not isinstance(entry, dict):
        raise TrainsimError(f"{where}: entry {name!r} must be a mapping with keys {', '.join(_ENTRY_KEYS)}")
    unknown = sorted((set(entry) - set(_ENTRY_KEYS)), key=str)
    if unknown:
        raise TrainsimError(
            f"{where}: {name}.{unknown[0]} is not a known key; allowed: {', '.join(_ENTRY_KEYS)}"
        )
    missing = [k for k in _ENTRY_KEYS if k not in entry]
    if missing:
        raise TrainsimError(f"{where}: {name}.{missing[0]} is missing; required: {', '.join(_ENTRY_KEYS)}")
    if entry["kind"] not in DEVICE_KINDS:
        raise TrainsimError(f"{where}: {name}.kind is {entry['kind']!r}; allowed: {', '.join(DEVICE_KINDS)}")
    flops = entry["peak_flops"]
    if not isinstance(flops, dict) or not flops:
        raise TrainsimError(f"{where}: {name}.peak_flops must map dtypes ({', '.join(DTYPES)}) to rates")
    for dtype in flops:
        if dtype not in DTYPES:
            raise TrainsimError(
                f"{where}: {name}.peak_flops.{dtype} is not a known dtype; allowed: {', '.join(DTYPES)}"
            )
    source = entry["source"]
    if not isinstance(source, str) or not source.strip():
        raise TrainsimError(f"{where}: {name}.source must be text naming where the figures come from")
    TEXT_LENGTH.check(len(source), f"{where}: {name}.source")
    kind = str(entry["kind"])
    try:
        return DeviceSpec(
            name=name,
            kind=kind,
            memory_bytes=int(_ranged(parse_size, entry["memory"], f"{kind}_memory", f"{name}.memory")),
            memory_bandwidth_Bps=_ranged(
                parse_bandwidth,
                entry["memory_bandwidth"],
                f"{kind}_memory_bandwidth",
                f"{name}.memory_bandwidth",
            ),
            peak_flops=MappingProxyType(
                {d: _ranged(parse_flops, v, "peak_flops", f"{name}.peak_flops.{d}") for d, v in flops.items()}
            ),
            source=source,
        )
    except TrainsimError as exc:
        raise TrainsimError(f"{where}: {exc}") from None


def _ranged(parse: Any, value: Any, quantity: str, where: str) -> float:
    """``parse(value)`` within the physical range ``quantity`` (:mod:`simcore.limits`)."""
    if isinstance(value, str):
        NAME_LENGTH.check(len(value), where)
    try:
        number = float(parse(value))
    except TrainsimError as exc:
        raise TrainsimError(f"{where}: {exc}") from None
    return check_physical(quantity, number, where, value)


def load_device_specs(text: str, where: str) -> dict[str, DeviceSpec]:
    """Parse a devices YAML document; ``where`` names it in error messages.

    Every figure is checked against its physical range (``simcore/data/physical_ranges.yaml``).
    """
    data = load_yaml(text, where)
    if not isinstance(data, dict):
        raise TrainsimError(f"{where}: expected a mapping of device name -> spec")
    specs = {}
    for key, entry in data.items():
        if isinstance(key, bool) or not isinstance(key, str | int) or not str(key).strip():
            raise TrainsimError(f"{where}: device names must be text, got {key!r}")
        NAME_LENGTH.check(len(str(key)), f"{where}: a device name")
        specs[str(key)] = _parse_entry(str(key), entry, where)
    return specs


@functools.cache
def _registry() -> dict[str, DeviceSpec]:
    text = resources.files("simcore.data").joinpath(_DATA_FILE).read_text(encoding="utf-8")
    return load_device_specs(text, f"simcore/data/{_DATA_FILE}")


def device_names() -> list[str]:
    """Names of every known device spec, sorted."""
    return sorted(_registry())


def device_spec(name: str) -> DeviceSpec:
    """The spec registered as ``name``; a :class:`TrainsimError` listing known names otherwise."""
    spec = _registry().get(name)
    if spec is None:
        raise TrainsimError(f"unknown device {name!r}; known: {', '.join(device_names())}")
    return spec
