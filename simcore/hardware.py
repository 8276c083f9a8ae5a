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

import yaml

from simcore.errors import TrainsimError
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
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
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
    if not str(entry["source"]).strip():
        raise TrainsimError(f"{where}: {name}.source is empty; every figure needs its source")
    try:
        return DeviceSpec(
            name=name,
            kind=str(entry["kind"]),
            memory_bytes=parse_size(entry["memory"], allow_zero=False),
            memory_bandwidth_Bps=parse_bandwidth(entry["memory_bandwidth"]),
            peak_flops=MappingProxyType({d: parse_flops(v) for d, v in flops.items()}),
            source=str(entry["source"]),
        )
    except TrainsimError as exc:
        raise TrainsimError(f"{where}: entry {name!r}: {exc}") from None


def load_device_specs(text: str, where: str) -> dict[str, DeviceSpec]:
    """Parse a devices YAML document; ``where`` names it in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TrainsimError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TrainsimError(f"{where}: expected a mapping of device name -> spec")
    return {str(name): _parse_entry(str(name), entry, where) for name, entry in data.items()}


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
