"""NCCL's tuning constants, read from ``simcore/data/nccl.yaml`` (each with its source there).

:func:`tables` returns the parsed, checked tables; the lookups below name what the cost model
(:mod:`simcore.collectives.cost`) asks for. Patterns are the latency-table rows: ``ring``,
``tree``, ``chain`` (broadcast/reduce), ``p2p`` (send/recv, all-to-all, parameter servers,
one-shot), ``nvls``, ``nvls_tree``, ``collnet_direct``, ``collnet_chain``, ``pat``.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Mapping
from typing import Any

from simcore.data import data_file
from simcore.errors import TrainsimError

__all__ = [
    "PROTOCOLS",
    "arch_of",
    "arch_param",
    "base_latency_us",
    "channels",
    "efficiency",
    "hop_latency_us",
    "latency_param",
    "ll_max_busbw",
    "node_index",
    "protocols_of",
    "size_channels",
    "tables",
    "tree_correction",
]

PROTOCOLS = ("LL", "LL128", "Simple")
HOP_CLASSES = ("nvlink", "pci", "net")
_DATA_FILE = "nccl.yaml"
_WHERE = f"simcore/data/{_DATA_FILE}"


def _check(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise TrainsimError(f"{_WHERE}: expected a mapping")
    for key in ("source", "arch", "latency", "bandwidth", "arch_params"):
        if key not in data:
            raise TrainsimError(f"{_WHERE}: missing {key!r}")
    base = data["latency"]["base_us"]
    for cls in HOP_CLASSES:
        table = data["latency"]["hop_us"][cls]
        for pattern, row in base.items():
            if set(table[pattern]) != set(row):
                raise TrainsimError(
                    f"{_WHERE}: hop_us.{cls}.{pattern} must give the protocols of base_us.{pattern}"
                )
    for pattern, row in data["bandwidth"]["efficiency"].items():
        for proto, value in row.items():
            if proto not in PROTOCOLS or not 0 < float(value) <= 1:
                raise TrainsimError(f"{_WHERE}: bandwidth.efficiency.{pattern}.{proto} = {value!r}")
    return data


@functools.cache
def tables() -> Mapping[str, Any]:
    """The parsed tuning tables (checked once)."""
    return _check(data_file(_DATA_FILE))


@functools.cache
def arch_of(gpu: str) -> str:
    """NCCL's compute-capability class (volta, ampere, hopper, blackwell) of a GPU spec name."""
    for pattern, arch in tables()["arch"].items():
        if fnmatch.fnmatchcase(gpu, pattern):
            return str(arch)
    return "ampere"


def arch_param(arch: str, key: str, default: Any = None) -> Any:
    return tables()["arch_params"].get(arch, {}).get(key, default)


def protocols_of(pattern: str) -> tuple[str, ...]:
    """The protocols NCCL implements for ``pattern`` (NVLS, CollNet and PAT: Simple only)."""
    row = tables()["latency"]["base_us"][pattern]
    return tuple(p for p in PROTOCOLS if p in row)


def base_latency_us(pattern: str, proto: str) -> float:
    return float(tables()["latency"]["base_us"][pattern][proto])


def hop_latency_us(hop_class: str, pattern: str, proto: str) -> float:
    return float(tables()["latency"]["hop_us"][hop_class][pattern][proto])


def latency_param(key: str) -> Any:
    return tables()["latency"][key]


def efficiency(pattern: str, proto: str, single_node: bool) -> float:
    """Fraction of the links' achievable rate ``pattern`` delivers with ``proto``."""
    table = tables()["bandwidth"]["efficiency"]
    row = table.get(f"{pattern}_single_node") if single_node else None
    return float((row or table[pattern])[proto])


def tree_correction(proto: str, size_bytes: float) -> float:
    """NCCL's medium-size tree derating, interpolated linearly in log2(size / 64)."""
    row = tables()["bandwidth"]["tree_correction"][proto]
    if size_bytes <= 64:
        return float(row[0])
    x = math.log2(size_bytes / 64.0)
    points = [*row, 1.0]  # from index len(row) on: no correction
    if x >= len(points) - 1:
        return 1.0
    k = int(x)
    frac = x - k
    return float(points[k] + (points[k + 1] - points[k]) * frac)


def ll_max_busbw(arch: str, nodes: int, vendor: str) -> float:
    """NCCL's LL throughput cap (GB/s of bus bandwidth): by GPU on one node, by CPU across nodes."""
    if nodes <= 1:
        return float(arch_param(arch, "ll_max_single_node", 87.7))
    row = tables()["bandwidth"]["ll_max_multi_node"]["amd" if vendor == "amd" else "intel"]
    return float(row[0 if nodes == 2 else 1])


def channels(nodes: int, nics: int) -> int:
    """Channels a collective spreads over: a fixed count on one node, two per NIC across nodes."""
    cfg = tables()["bandwidth"]["channels"]
    if nodes <= 1 or nics <= 0:
        return int(cfg["single_node"])
    return max(1, min(int(cfg["max"]), int(cfg["per_nic"]) * nics))


def size_channels(channels: int, pattern: str, proto: str, ranks: int, size_bytes: float) -> int:
    """Channels NCCL runs ``pattern`` with ``proto`` on for ``size_bytes`` (enqueue.cc's channel
    tuning): the largest count up to ``channels`` whose threads each get at least the protocol's
    threshold of bytes, at least one. Patterns outside the rule keep ``channels``."""
    cfg = tables()["bandwidth"]["channel_tuning"]
    if pattern not in cfg["patterns"] or channels <= 1:
        return channels
    threshold = float(cfg["thread_threshold"][proto])
    if pattern == "ring" and proto == "LL" and cfg["ring_ll_threshold_times_ranks"]:
        threshold *= ranks
    per_channel = float(cfg["max_threads"][proto]) * threshold
    return max(1, min(channels, int(size_bytes // per_channel)))


def node_index(nodes: int) -> int:
    """NCCL's index2: 0 for one node, 1 for two, 2 for more."""
    return min(max(nodes, 1), 3) - 1
