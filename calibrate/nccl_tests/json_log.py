"""Reading nccl-tests' ``-J`` JSON report (v2.17+): ``config`` (threads, GPUs, devices) and
``results[].out_of_place / in_place`` (time, alg_bw, bus_bw, nwrong), as nccl-tests' ``src/util.cu``
writes them (numbers with six decimals, ``"nan"`` as a string, the root as a padded string).
Every number is checked finite; the collective comes from the caller, ``args[0]``, the file's
name, or else the results (:mod:`calibrate.nccl_tests.evidence`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

from calibrate.nccl_tests.evidence import Bandwidths, infer_op
from calibrate.nccl_tests.table import NCCL_TYPES, collective_row, op_from_program
from simcore.calibration.ranges import physical_range
from simcore.errors import TrainsimError

__all__ = ["parse_json"]


def _json_number(value: Any, where: str, *, whole: bool = False) -> float:
    """A finite JSON number (nccl-tests writes some as strings, e.g. ``"root": "    -1"``)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TrainsimError(f"{where}: expected a finite number, got {str(value)[:40]!r}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise TrainsimError(f"{where}: expected a finite number, got {str(value)[:40]!r}")
    if whole and (value != int(value) or value < 0):
        raise TrainsimError(f"{where}: expected a whole number >= 0, got {value!r}")
    return float(value)


def _json_ranks(config: Mapping[str, Any], where: str) -> tuple[int, int, str | None]:
    """Ranks, ranks per node and device name(s) from the report's ``config``."""
    listed = config.get("devices") or []
    if not isinstance(listed, list):
        raise TrainsimError(f"{where}.config.devices: expected a list of devices, got {str(listed)[:40]!r}")
    devices = [d for d in listed if isinstance(d, dict)]
    hosts = [str(d.get("hostname", "")) for d in devices]
    names = sorted({str(d["device_info"]) for d in devices if d.get("device_info")})
    ranks = len(hosts)
    if not ranks:
        threads = _json_number(config.get("nthreads", 1), f"{where}.config.nthreads", whole=True)
        gpus = _json_number(config.get("ngpus", 1), f"{where}.config.ngpus", whole=True)
        ranks = max(1, int(threads) * int(gpus))
    physical_range("ranks").check(ranks, f"{where}.config: the rank count")
    per_node = max((hosts.count(h) for h in set(hosts)), default=ranks)
    return ranks, per_node, " + ".join(names) or None


def _json_results(data: Mapping[str, Any], source: str) -> list[tuple[str, dict[str, Any]]]:
    results = []
    for i, result in enumerate(data["results"]):
        where = f"{source}: results[{i}]"
        if not isinstance(result, dict) or "size" not in result:
            raise TrainsimError(f"{where}: expected an object with 'size'")
        results.append((where, result))
    return results


def _json_op(results: list[tuple[str, dict[str, Any]]], ranks: int, source: str) -> str:
    """The collective a report without a program name measured, from its results' evidence."""
    bandwidths, roots, redops = [], set(), set()
    for _, result in results:
        with contextlib.suppress(TrainsimError):
            roots.add(int(_json_number(result.get("root"), "")))
        if isinstance(result.get("redop"), str):
            redops.add(result["redop"])
        for key in ("out_of_place", "in_place"):
            block = result.get(key)
            if isinstance(block, dict):
                with contextlib.suppress(TrainsimError):  # written with 6 decimals (%f)
                    algbw, busbw = (
                        _json_number(block.get("alg_bw"), ""),
                        _json_number(block.get("bus_bw"), ""),
                    )
                    bandwidths.append(Bandwidths(algbw, busbw, 5e-7 + 1e-9 * algbw, 5e-7 + 1e-9 * busbw))
    return infer_op(ranks, bandwidths, roots, redops, where=source)


def parse_json(data: Any, *, source: str = "<json>", op: str | None = None) -> list[dict[str, Any]]:
    """Rows of nccl-tests' ``-J`` report (``results[].out_of_place / in_place``)."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise TrainsimError(f"{source}: not an nccl-tests JSON report (no 'results' list)")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    config: dict[str, Any] = data["config"] if isinstance(data.get("config"), dict) else {}
    ranks, per_node, device = _json_ranks(config, source)
    results = _json_results(data, source)
    op = op or op_from_program(str(args[0]) if args else "") or op_from_program(source)
    op = op or _json_op(results, ranks, source)
    rows = []
    for where, result in results:
        size = _json_number(result["size"], f"{where}.size", whole=True)
        count = _json_number(result.get("count", 0), f"{where}.count", whole=True)
        dtype = result.get("type")
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            block = result.get(key)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise TrainsimError(f"{where}.{key}: expected an object, got {str(block)[:40]!r}")
            time_us = _json_number(block.get("time", block.get("cpu_time")), f"{where}.{key}.time")
            if time_us <= 0:
                raise TrainsimError(f"{where}.{key}.time: {time_us!r} us must be > 0")
            wrong = block.get("nwrong")
            rows.append(collective_row(
                op=op, size_bytes=int(size), ranks=ranks, ranks_per_node=per_node, time_us_mean=time_us,
                count=int(count), dtype=NCCL_TYPES.get(str(dtype), str(dtype)), backend="nccl", in_place=in_place,
                source=source, wrong=None if wrong is None else _json_number(wrong, f"{where}.{key}.nwrong"),
                device=device,
            ))  # fmt: skip
    if not rows:
        raise TrainsimError(f"{source}: the nccl-tests JSON report has no results")
    return rows
