"""The tidy collective row every measurement becomes, and nccl-tests' table that prints it.

``calibrate.collectives`` prints its sweep in nccl-tests' layout (:func:`format_table_header`,
:func:`format_table_row`; nccl-tests' ``src/util.cu``) and writes one :func:`collective_row` per
(op, size, group, repeat); the readers of real nccl-tests logs (:mod:`calibrate.nccl_tests.text_log`,
:mod:`calibrate.nccl_tests.json_log`) make the same rows.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simcore.calibration.profile import busbw_factor
from simcore.errors import TrainsimError

__all__ = [
    "COLLECTIVE_FIELDS",
    "NCCL_TYPES",
    "Warn",
    "collective_row",
    "format_float",
    "format_table_header",
    "format_table_row",
    "op_from_program",
    "print_warning",
    "program_name",
]

COLLECTIVE_FIELDS = (
    "kind", "op", "size_bytes", "count", "dtype", "ranks", "ranks_per_node", "nodes", "scope", "group",
    "backend", "in_place", "iters", "time_us_mean", "time_us_p50", "time_us_min", "time_us_max",
    "algbw_GBps", "busbw_GBps", "wrong", "repeat", "source", "device",
)  # fmt: skip
# nccl-tests program -> our op name (the simulator's names, simcore.collectives.OPS).
_PROGRAM_OPS = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv", "alltoall": "alltoall",
}  # fmt: skip
# nccl-tests type names -> torch dtype names, as our job records them.
NCCL_TYPES = {
    "float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
    "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
    "uint64": "uint64", "int": "int32", "char": "int8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}  # fmt: skip
_NCCL_TYPE = {v: k for k, v in reversed(list(NCCL_TYPES.items()))}


def collective_row(
    *,
    op: str,
    size_bytes: int,
    ranks: int,
    time_us_mean: float,
    ranks_per_node: int | None = None,
    group: str = "world",
    **extra: Any,
) -> dict[str, Any]:
    """One tidy measurement; algbw/busbw follow nccl-tests (algbw = size / time, GB = 1e9 B)."""
    per_node = ranks if ranks_per_node is None else ranks_per_node
    nodes = max(1, ranks // max(1, per_node))
    algbw = size_bytes / (time_us_mean * 1e-6) / 1e9 if time_us_mean > 0 else 0.0
    row: dict[str, Any] = dict.fromkeys(COLLECTIVE_FIELDS)
    row.update(
        kind="collective", op=op, size_bytes=int(size_bytes), ranks=ranks, ranks_per_node=per_node,
        nodes=nodes, scope="intra_node" if nodes == 1 else "inter_node", group=group,
        time_us_mean=time_us_mean, algbw_GBps=algbw, busbw_GBps=algbw * busbw_factor(op, ranks),
        in_place=False, repeat=0, source="trainsim",
    )  # fmt: skip
    unknown = set(extra) - set(COLLECTIVE_FIELDS)
    if unknown:
        raise TrainsimError(f"unknown collective row fields {sorted(unknown)}; allowed: {COLLECTIVE_FIELDS}")
    row.update(extra)
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:  # a time so small that size / time overflows, or a non-finite figure passed in
        raise TrainsimError(
            f"{op} of {size_bytes} B in {time_us_mean!r} us gives non-finite {', '.join(bad)}"
        )
    return row


def op_from_program(name: str) -> str | None:
    """``all_reduce_perf`` / ``./build/sendrecv_perf_mpi`` / ``send_recv`` -> our op name, else None."""
    stem = Path(name).name
    # Longest first: "reduce" is inside "all_reduce" and "reduce_scatter".
    for program in sorted({*_PROGRAM_OPS, *_PROGRAM_OPS.values()}, key=len, reverse=True):
        if re.search(rf"(^|[^a-z]){program}(_perf|\b|_)", stem):
            return _PROGRAM_OPS.get(program, program)
    return None


def program_name(op: str) -> str:
    """The nccl-tests program measuring ``op``: ``send_recv`` -> ``sendrecv_perf``."""
    programs = {v: k for k, v in _PROGRAM_OPS.items()}
    if op not in programs:
        raise TrainsimError(f"no nccl-tests program for {op!r}; known: {', '.join(sorted(programs))}")
    return f"{programs[op]}_perf"


# --- printing (the table calibrate.collectives shows as it measures) ---------------------------


def format_float(value: float, width: int) -> str:
    """nccl-tests' ``getFloatStr``: 2, 1 or 0 decimals while they fit, else ``%.1e``."""
    power, bound = 0, 1
    while value >= bound:
        power, bound = power + 1, bound * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def format_table_header(title: str, *, in_place: bool) -> str:
    block = "in-place" if in_place else "out-of-place"
    return "\n".join([
        f"# {title}",
        "#",
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           {block}",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}",
    ])  # fmt: skip


def format_table_row(row: Mapping[str, Any]) -> str:
    redop = "sum" if row["op"] in ("all_reduce", "reduce_scatter", "reduce") else "none"
    root = 0 if row["op"] in ("broadcast", "reduce") else -1
    dtype = _NCCL_TYPE.get(str(row.get("dtype")), str(row.get("dtype")))
    return (
        f"{row['size_bytes']:12d}  {row.get('count') or 0:12d}  {dtype:>8}  {redop:>6}  {root:6d}"
        f"  {format_float(row['time_us_mean'], 7)}  {format_float(row['algbw_GBps'], 6)}"
        f"  {format_float(row['busbw_GBps'], 6)}     N/A"
    )


Warn = Callable[[str], None]


def print_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
