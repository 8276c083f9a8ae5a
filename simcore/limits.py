"""Limits on what input may ask for: size bounds and physical ranges, each with its reason.

**Size bounds** (:data:`GPUS_PER_CLUSTER`, :data:`DEVICES_PER_NODE`, ...) are ours: they keep a
cluster, a model or an input file to what the simulator builds in seconds and a few GB, far above
any real system, and they are checked *before* anything is expanded (a device range
``gpu{0..99999999}`` is refused from its two end points, never listed). **Physical ranges**
(:func:`physical_range`) are data with sources, in ``data/physical_ranges.yaml``: what a link
bandwidth, a latency, a peak FLOP/s, an NVLink count or a memory size can be on real hardware.
Every error names where the number came from, the bound or range, and why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.units import parse_bandwidth, parse_flops, parse_size, parse_time

__all__ = [
    "DEVICES_PER_CLUSTER",
    "DEVICES_PER_NODE",
    "GPUS_PER_CLUSTER",
    "INPUT_FILE_BYTES",
    "LINKS_PER_CLUSTER",
    "LINKS_PER_NODE",
    "MEASUREMENT_FILE_BYTES",
    "MODEL_BLOCKS",
    "MODEL_DIMENSION",
    "MODEL_OPERATORS",
    "NAME_LENGTH",
    "TEXT_LENGTH",
    "YAML_ALIASES",
    "YAML_DEPTH",
    "YAML_NODES",
    "Bound",
    "PhysicalRange",
    "check_physical",
    "physical_range",
]


@dataclass(frozen=True, slots=True)
class Bound:
    """At most ``limit`` of ``what``, for the reason ``why``."""

    what: str
    limit: int
    why: str

    def check(self, count: int, where: str, subject: str = "") -> int:
        """``count`` if within the bound; else a :class:`TrainsimError` naming ``where`` and why."""
        if count > self.limit:
            asked = f"{subject} gives {count:,}" if subject else f"{count:,}"
            raise TrainsimError(
                f"{where}: {asked} {self.what}; at most {self.limit:,} are allowed: {self.why}"
            )
        return count

    def check_each(self, value: int, where: str, name: str) -> int:
        """``value`` if within the bound, for bounds on one value (``what`` reads "for one ...")."""
        if value > self.limit:
            raise TrainsimError(
                f"{where}: {name} is {value:,}; at most {self.limit:,} is allowed {self.what}: {self.why}"
            )
        return value


# --- cluster size ---------------------------------------------------------------------------------
GPUS_PER_CLUSTER = Bound(
    "GPUs (ranks) in one cluster",
    65_536,
    "the largest published training runs used 16,384 GPUs, Llama 3 among them; a 65,536-GPU "
    "cluster already takes ~10 s and ~0.5 GB to build, and simulating collectives over it minutes",
)
DEVICES_PER_NODE = Bound(
    "devices in one node",
    1_024,
    "a GB200 NVL72 rack, the largest NVLink domain one node can stand for, has ~200 devices: "
    "72 GPUs, 36 CPUs, 18 NVSwitch chips and NICs",
)
LINKS_PER_NODE = Bound(
    "links in one node",
    16_384,
    "a full mesh of 128 devices has 8,128 links; real servers have tens",
)
DEVICES_PER_CLUSTER = Bound(
    "devices in one cluster",
    262_144,
    "65,536 GPUs in 8-GPU servers are ~190,000 devices with their CPUs, NICs and switches",
)
LINKS_PER_CLUSTER = Bound(
    "links in one cluster",
    1_048_576,
    "65,536 GPUs in 8-GPU servers have ~300,000 links",
)

# --- models (shape files) ---------------------------------------------------------------------------
MODEL_BLOCKS = Bound(
    "transformer blocks (layers)",
    2_048,
    "the deepest published transformers have ~100 blocks in production (GPT-3 96, Llama 3 405B "
    "126) and 1,000 in research (DeepNet, Wang et al. 2022); 2,048 blocks already take ~10 s per "
    "strategy to simulate",
)
MODEL_OPERATORS = Bound(
    "operators in one model",
    20_000,
    "a ResNet-1001, the deepest published CNN, has ~3,000 operators and a 2,048-block transformer ~16,000",
)
MODEL_DIMENSION = Bound(
    "for one size of a model (a width, a count, a length)",
    2**24,
    "16,777,216 is above any published width, vocabulary (~256k) or context length (~10M tokens)",
)

# --- input files ------------------------------------------------------------------------------------
INPUT_FILE_BYTES = Bound(
    "bytes in one input file",
    2**20,
    "the largest real inputs, an nvidia-smi topo -m capture of a 72-GPU rack or a ResNet layer "
    "list, are well under 100 kB; parsing 1 MiB of YAML already takes about 2 s",
)
MEASUREMENT_FILE_BYTES = Bound(
    "bytes in one measurement file (an nccl-tests log, a calibration record file, a profile)",
    64 * 2**20,
    "a full nccl-tests sweep is ~120 bytes a row and a calibration record ~300 bytes, so 64 MiB "
    "holds ~200,000 measurements, far more than a day's sweep",
)
TEXT_LENGTH = Bound(
    "characters in one text field",
    4_096,
    "a description or source is a sentence or two and a URL",
)
NAME_LENGTH = Bound(
    "characters in one name",
    256,
    "a device, node type, link class or model name is a short identifier",
)
YAML_ALIASES = Bound(
    "YAML aliases (*name) in one file",
    256,
    "a data file may reuse a few anchors; thousands of aliases are an expansion bomb",
)
YAML_NODES = Bound(
    "YAML values once aliases are expanded",
    1_000_000,
    "nested aliases can make a small file stand for billions of values, a 'billion laughs' bomb",
)
YAML_DEPTH = Bound(
    "levels of nesting",
    64,
    "the deepest shipped file nests about ten levels; deeper documents exhaust the parser's stack",
)


# --- physical ranges --------------------------------------------------------------------------------
_RANGES_FILE = "physical_ranges.yaml"
_PARSERS: dict[str, Callable[[Any], float]] = {
    "bandwidth": parse_bandwidth,
    "time": parse_time,
    "size": lambda v: float(parse_size(v)),
    "flops": parse_flops,
    "count": float,
    "ratio": float,
}
_RANGE_KEYS = ("what", "kind", "min", "max", "why", "source")


@dataclass(frozen=True, slots=True)
class PhysicalRange:
    """What one quantity can be on real hardware: ``low <= value <= high`` (SI units)."""

    name: str
    what: str
    low: float
    high: float
    low_text: str  # as written in the data file, shown in errors
    high_text: str
    why: str
    source: str

    def check(self, value: float, where: str, shown: object = None) -> float:
        """``value`` if finite and within the range; else a :class:`TrainsimError` with the range and source."""
        if not (math.isfinite(value) and self.low <= value <= self.high):
            text = value if shown is None else shown
            raise TrainsimError(
                f"{where}: {text} is outside the physical range {self.low_text} to {self.high_text} "
                f"of the {self.what}: {self.why} (source: {self.source})"
            )
        return value


def _parse_range(name: str, entry: Any, where: str) -> PhysicalRange:
    if not isinstance(entry, dict) or set(entry) != set(_RANGE_KEYS):
        raise TrainsimError(f"{where}: {name} must have exactly the keys {', '.join(_RANGE_KEYS)}")
    parse = _PARSERS.get(str(entry["kind"]))
    if parse is None:
        raise TrainsimError(f"{where}: {name}.kind {entry['kind']!r}; allowed: {', '.join(_PARSERS)}")
    low, high = parse(entry["min"]), parse(entry["max"])
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high):
        raise TrainsimError(f"{where}: {name}: min {entry['min']!r} and max {entry['max']!r} are not a range")
    why = " ".join(str(entry["why"]).split())
    return PhysicalRange(
        name, str(entry["what"]), low, high, str(entry["min"]), str(entry["max"]), why, str(entry["source"])
    )


@functools.cache
def _ranges() -> dict[str, PhysicalRange]:
    where = f"simcore/data/{_RANGES_FILE}"
    data = data_file(_RANGES_FILE)
    return {str(name): _parse_range(str(name), entry, where) for name, entry in data.items()}


def physical_range(name: str) -> PhysicalRange:
    """The range of quantity ``name`` (``link_bandwidth``, ``nvlinks``, ``gpu_memory`` ...)."""
    ranges = _ranges()
    if name not in ranges:
        raise KeyError(f"no physical range {name!r}; known: {', '.join(sorted(ranges))}")
    return ranges[name]


def check_physical(name: str, value: float, where: str, shown: object = None) -> float:
    """``value`` checked against the physical range ``name`` (see :class:`PhysicalRange.check`)."""
    return physical_range(name).check(value, where, shown)
