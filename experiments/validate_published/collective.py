"""Collective rows: an nccl-tests run simulated on a topology preset.

The setup is what ``all_reduce_perf`` ran: the operation, the element type (nccl-tests' default
``float``), the ranks and nodes, one message size or a sweep ``-b MIN -e MAX -f 2``, and the
algorithm when the row pins it (``NCCL_ALGO``). The prediction is
:func:`experiments.nccl_sim.cli.rows_for` on :func:`topologies.load_cluster`'s cluster, so sizes
are rounded and bus bandwidths computed exactly as ``python -m experiments.nccl_sim`` prints them.
A sweep's metric is the largest bus bandwidth over its sizes (the "peak" rows) or, for a row that
quotes nccl-tests' closing "# Avg bus bandwidth" line, their mean (nccl-tests src/common.cu adds
every size's bus bandwidth, out-of-place and in-place alike, and divides by the count; the
simulator's two runs are the same, so the mean over the sizes).

A row whose source does not show the machine's topology (no ``nvidia-smi topo -m``) names the
presets it could have run on under ``topology_unknown`` (e.g. an H100 PCIe pair with 1, 2 or 3
NVLink bridges): it is predicted on its first ``topology`` preset, the band over those presets is
shown beside it, and it is scored in its own category (:data:`TOPOLOGY_UNKNOWN`), never in the
collective categories, and never fitted.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.nccl_sim.cli import DATATYPES, rows_for, size_ladder
from experiments.validate_published.base import (
    Prediction,
    first_known,
    missing_name,
    name_list,
    positive_int,
)
from simcore.collectives import ALGORITHMS, OPS
from simcore.errors import TrainsimError
from simcore.topology import Topology
from simcore.units import parse_size
from topologies import load_cluster, preset_names

__all__ = ["KEYS", "METRIC_NAMES", "TOPOLOGY_UNKNOWN", "CollectiveSetup", "format_size", "parse"]

KEYS = ("topology", "gpus", "nodes", "op", "size", "sweep", "algorithm", "datatype", "topology_unknown")
TOPOLOGY_UNKNOWN = "collective_topology_unknown"
METRIC_NAMES = ("time_us", "busbw", "busbw_peak", "busbw_avg")
SMALL_MAX_BYTES = 1024**2  # "small message" rows: <= 1 MiB (the collectives issue's target split)
LARGE_MIN_BYTES = 64 * 1024**2  # "large message" rows: >= 64 MiB, and every sweep's peak


def format_size(size: int) -> str:
    """``8 B``, ``1 KiB``, ``16 GiB`` ... as nccl-tests' powers of 1024."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


@functools.lru_cache(maxsize=32)
def _cluster(preset: str, gpus: int, nodes: int) -> Topology:
    return load_cluster(preset, gpus=gpus, nodes=nodes)


def _known_presets() -> list[str]:
    return preset_names()


@dataclass(frozen=True, slots=True)
class CollectiveSetup:
    """One nccl-tests measurement as the simulator runs it."""

    hardware: str
    topologies: tuple[str, ...]
    gpus: int
    nodes: int
    op: str
    sizes: tuple[int, ...]
    sweep: bool
    algorithm: str | None
    datatype: str
    band: tuple[str, ...] = ()  # presets the unknown topology may be (empty: the topology is known)

    def category(self) -> str:
        """``collective_large`` / ``_mid`` / ``_small`` by the message size (a sweep is large);
        :data:`TOPOLOGY_UNKNOWN` where the source does not show the topology."""
        if self.band:
            return TOPOLOGY_UNKNOWN
        if self.sweep or self.sizes[0] >= LARGE_MIN_BYTES:
            return "collective_large"
        return "collective_small" if self.sizes[0] <= SMALL_MAX_BYTES else "collective_mid"

    def missing(self) -> list[str]:
        if first_known(self.topologies, _known_presets) is None:
            return [missing_name("topology preset", self.topologies, self.hardware)]
        unknown = [name for name in self.band if name not in _known_presets()]
        return [missing_name("topology preset", unknown, "the topology band")] if unknown else []

    def _preset(self) -> str:
        return first_known(self.topologies, _known_presets) or (self.topologies or ("?",))[0]

    def describe(self) -> str:
        sizes = (
            f"sweep {format_size(self.sizes[0])}..{format_size(self.sizes[-1])} x2"
            if self.sweep
            else format_size(self.sizes[0])
        )
        algorithm = f"pinned {self.algorithm}" if self.algorithm else "chosen by the simulator"
        return (
            f"{self.op} {self.datatype} on {self._preset()}, {self.gpus} GPUs / {self.nodes} node(s); "
            f"{sizes}; algorithm {algorithm}"
        )

    def _value(self, preset: str, metric: str) -> tuple[float, str, int]:
        """(the metric's value, the algorithm, the size it was read at) on ``preset``."""
        topology = _cluster(preset, self.gpus, self.nodes)
        rows = rows_for(topology, self.op, self.sizes, datatype=self.datatype, algorithm=self.algorithm)
        if metric == "busbw_peak":
            best = max(rows, key=lambda r: r.busbw_GBps)
            return best.busbw_GBps, best.algorithm, best.size_bytes
        if metric == "busbw_avg":
            # the algorithm NCCL ran at the sweep's largest size stands for the row
            return sum(r.busbw_GBps for r in rows) / len(rows), rows[-1].algorithm, rows[-1].size_bytes
        value = rows[0].time_us if metric == "time_us" else rows[0].busbw_GBps
        return value, rows[0].algorithm, rows[0].size_bytes

    def predict(self, metric: str) -> Prediction:
        value, algorithm, size = self._value(self._preset(), metric)
        setup = self.describe() + (f"; peak at {format_size(size)}" if metric == "busbw_peak" else "")
        if metric == "busbw_avg":
            setup += f"; mean over the {len(self.sizes)} sizes (nccl-tests' Avg bus bandwidth)"
        if self.band:
            values = [self._value(name, metric)[0] for name in self.band]
            setup += f"; topology unknown: {min(values):.4g}..{max(values):.4g} over {', '.join(self.band)}"
        return Prediction(value, setup, algorithm)


def _sizes(entry: Mapping[str, Any], where: str) -> tuple[tuple[int, ...], bool]:
    if ("size" in entry) == ("sweep" in entry):
        raise TrainsimError(f"{where}: give exactly one of 'size' or 'sweep: [min, max]'")
    if "size" in entry:
        return (parse_size(entry["size"]),), False
    bounds = entry["sweep"]
    if not isinstance(bounds, list) or len(bounds) != 2:
        raise TrainsimError(f"{where}: 'sweep' must be [min, max], got {bounds!r}")
    return tuple(size_ladder(parse_size(bounds[0]), parse_size(bounds[1]), 2, 0)), True


def parse(entry: Mapping[str, Any], where: str, hardware: str) -> CollectiveSetup:
    """The setup of a ``kind: collective`` entry (validated; presets are checked by ``missing``)."""
    op = entry.get("op")
    if op not in OPS:
        raise TrainsimError(f"{where}: op {op!r} is not a collective; allowed: {', '.join(OPS)}")
    algorithm = entry.get("algorithm")
    if algorithm is not None and algorithm not in ALGORITHMS[op]:
        raise TrainsimError(f"{where}: algorithm {algorithm!r} does not implement {op}")
    datatype = entry.get("datatype", "float")
    if datatype not in DATATYPES:
        raise TrainsimError(f"{where}: datatype {datatype!r}; allowed: {', '.join(DATATYPES)}")
    sizes, sweep = _sizes(entry, where)
    return CollectiveSetup(
        hardware,
        name_list(entry, "topology", where),
        positive_int(entry, "gpus", where),
        positive_int(entry, "nodes", where),
        op,
        sizes,
        sweep,
        algorithm,
        datatype,
        name_list(entry, "topology_unknown", where, required=False),
    )
