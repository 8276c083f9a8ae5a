"""The nccl-tests table: the tidy row every collective measurement becomes, printing it, parsing it.

``calibrate.collectives`` prints its sweep in nccl-tests' layout and writes one tidy row per
(op, size, group, repeat); this module reads real nccl-tests output into the same rows, so a
cluster measured with ``all_reduce_perf`` is fitted exactly like one measured with our job:

    python -m calibrate.nccl_tests all_reduce.txt sendrecv.json -o runs/nccl.jsonl

Text output of every nccl-tests version is accepted: ``#`` header lines, the column header that
says which columns this test prints (``redop``/``root`` are missing in old versions and some tests,
old versions print ``error`` instead of ``#wrong``, v2.17 may add per-iteration columns), ``N/A``
for ``#wrong``, values in ``%.1e``, out-of-place and in-place blocks, several runs in one file, and
the ``# Avg bus bandwidth`` footer. The ``-J`` JSON of v2.17+ is read by :func:`parse_json`.
Files are taken as users have them: a name that does not say the collective (a Slurm
``slurm-1234.out``) is fine when the log's header or rows tell it
(:mod:`calibrate.nccl_tests.evidence`); a log cut mid-row (a job stopped by its time limit) keeps
its complete rows, with a warning naming the line dropped; a capture saved by Windows PowerShell
(UTF-16) is decoded (:mod:`calibrate.nccl_tests.capture`). Malformed input raises
:class:`TrainsimError` naming the file and line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate.common.records import RecordWriter
from calibrate.nccl_tests.capture import read_capture
from calibrate.nccl_tests.evidence import Bandwidths, half_unit, infer_op
from simcore.calibration.profile import busbw_factor
from simcore.calibration.ranges import physical_range
from simcore.errors import TrainsimError, cli_entry

__all__ = [
    "COLLECTIVE_FIELDS",
    "collective_row",
    "format_float",
    "format_table_header",
    "format_table_row",
    "op_from_program",
    "parse_file",
    "parse_json",
    "parse_text",
    "program_name",
]

COLLECTIVE_FIELDS = (
    "kind", "op", "size_bytes", "count", "dtype", "ranks", "ranks_per_node", "nodes", "scope", "group",
    "backend", "in_place", "iters", "time_us_mean", "time_us_p50", "time_us_min", "time_us_max",
    "algbw_GBps", "busbw_GBps", "wrong", "repeat", "source", "device",
)  # fmt: skip
Warn = Callable[[str], None]


def _print_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


# nccl-tests program -> our op name (the simulator's names, simcore.collectives.OPS).
_PROGRAM_OPS = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv", "alltoall": "alltoall",
}  # fmt: skip
# nccl-tests type names -> torch dtype names, as our job records them.
_TYPES = {
    "float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
    "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
    "uint64": "uint64", "int": "int32", "char": "int8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}  # fmt: skip
_NCCL_TYPE = {v: k for k, v in reversed(list(_TYPES.items()))}


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


# --- parsing text ----------------------------------------------------------------------------

_DEVICE = re.compile(
    r"#\s+Rank\s+(\d{1,7})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)"
)
_NTHREAD = re.compile(r"#\s*nThread\s+(\d{1,7})\s+nGpus\s+(\d{1,7})")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_METRICS = {"time", "cputime", "algbw", "busbw", "#wrong", "error", "i_min", "i_max", "i_p99", "i_cv%"}


@dataclass
class _Run:
    """What one nccl-tests run said about itself before and during its table."""

    op: str | None
    threads_gpus: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    devices: dict[int, str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    pending: list[tuple[int, list[str]]] = field(default_factory=list)  # (line number, tokens)

    @property
    def ranks(self) -> int:
        return len(self.hosts) or self.threads_gpus or 1

    @property
    def ranks_per_node(self) -> int:
        if not self.hosts:
            return self.ranks
        counts = [list(self.hosts.values()).count(h) for h in dict.fromkeys(self.hosts.values())]
        return max(counts)

    @property
    def device(self) -> str | None:
        names = sorted({d for d in self.devices.values() if d})
        return " + ".join(names) or None


def _number(token: str, where: str, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise TrainsimError(f"{where}: {what} {token!r} is not a number") from None
    if not math.isfinite(value):
        raise TrainsimError(f"{where}: {what} {token!r} is not a finite number")
    return value


def _columns(tokens: list[str], where: str) -> list[str]:
    """A column header, checked: leading fields, then blocks that each hold time, algbw and busbw."""
    starts = [i for i, c in enumerate(tokens) if c in ("time", "cputime")]
    width = _block_width(tokens)
    blocks = [tokens[b : b + width] for b in range(starts[0], len(tokens), width)]
    if (len(tokens) - starts[0]) % width or not all(
        {"algbw", "busbw"} <= set(b) and b[0] == tokens[starts[0]] for b in blocks
    ):
        raise TrainsimError(f"{where}: a column header nccl-tests does not print: {' '.join(tokens)[:80]!r} "
                            "(each block needs time, algbw and busbw)")  # fmt: skip
    return tokens


def _positive(token: str, where: str, what: str) -> float:
    value = _number(token, where, what)
    if value <= 0:
        raise TrainsimError(f"{where}: {what} {token!r} must be > 0")
    return value


def _header_line(run: _Run, body: str, where: str) -> None:
    """Record what a ``#`` line tells: the op, devices, rank count, column layout."""
    if m := _STARTING.match(body):
        run.op = op_from_program(m.group(1)) or run.op
    elif m := _NTHREAD.match(body):
        run.threads_gpus = int(m.group(1)) * int(m.group(2))
    elif m := _DEVICE.match(body):
        run.hosts[int(m.group(1))] = m.group(2)
        run.devices[int(m.group(1))] = m.group(3).strip()
    elif "out-of-place" in body or "in-place" in body:
        run.blocks = re.findall(r"out-of-place|in-place", body)
    else:
        tokens = body.lstrip("#").split()
        if tokens[:1] == ["size"] and any(t in ("time", "cputime") for t in tokens):
            run.columns = _columns(tokens, where)


def _leading(run: _Run) -> list[str]:
    return [c for c in run.columns if c not in _METRICS]


def _fields(run: _Run, tokens: list[str]) -> list[str]:
    """The row's fields; old broadcast_perf prints an empty redop, one field short: put it back."""
    leading = _leading(run)
    if len(tokens) == len(run.columns) - 1 and "redop" in leading:
        at = leading.index("redop")
        if at < len(tokens) and re.fullmatch(r"-?\d+", tokens[at]):
            return [*tokens[:at], "", *tokens[at:]]
    return tokens


def _blocks(run: _Run, tokens: list[str]) -> list[dict[str, str]]:
    """The row's metric blocks (out-of-place, in-place) as column -> token."""
    start, width = len(_leading(run)), _block_width(run.columns)
    return [dict(zip(run.columns[b : b + width], tokens[b : b + width], strict=True))
            for b in range(start, len(tokens), width)]  # fmt: skip


def _data_rows(
    run: _Run, op: str, tokens: list[str], where: str, repeat: int, source: str
) -> list[dict[str, Any]]:
    tokens = _fields(run, tokens)
    if len(tokens) != len(run.columns):
        raise TrainsimError(f"{where}: {len(tokens)} fields, the header announced {len(run.columns)} "
                            f"({' '.join(run.columns)})")  # fmt: skip
    fields = dict(zip(_leading(run), tokens, strict=False))
    size = _number(fields["size"], where, "size")
    if size != int(size) or size < 0:
        raise TrainsimError(f"{where}: size {fields['size']!r} is not a whole number of bytes")
    blocks = run.blocks or ["out-of-place", "in-place"]
    rows = []
    for b, metrics in enumerate(_blocks(run, tokens)):
        time_key = "time" if "time" in metrics else "cputime"
        wrong_text = metrics.get("#wrong", metrics.get("error", "N/A"))
        rows.append(collective_row(
            op=op, size_bytes=int(size), ranks=run.ranks, ranks_per_node=run.ranks_per_node,
            time_us_mean=_positive(metrics[time_key], where, "time"),
            count=int(_number(fields.get("count", "0"), where, "count")),
            dtype=_TYPES.get(fields.get("type", ""), fields.get("type")), backend="nccl",
            in_place=blocks[min(b, len(blocks) - 1)] == "in-place", repeat=repeat, source=source,
            wrong=None if wrong_text == "N/A" else _number(wrong_text, where, "#wrong"), device=run.device,
        ))  # fmt: skip
        _keep_reported_bandwidth(rows[-1], metrics, where)
    return rows


def _block_width(columns: Sequence[str]) -> int:
    starts = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
    return starts[1] - starts[0] if len(starts) > 1 else len(columns) - starts[0]


def _keep_reported_bandwidth(row: dict[str, Any], metrics: Mapping[str, str], where: str) -> None:
    """Keep nccl-tests' own algbw/busbw (exact where the printed time is rounded), after checking
    that busbw follows from size, time and the rank count (a wrong count changes the factor)."""
    reported = _number(metrics["busbw"], where, "busbw")
    computed = row["busbw_GBps"]
    # Printed times carry at least two significant digits (5 % error at worst, in %.1e); a rank
    # count far off (device lines cut from a capture) changes the bus factor more (2 vs 8: 1 vs 1.75).
    if reported >= 1.0 and (computed <= 0 or not 0.9 < reported / computed < 1.1):
        raise TrainsimError(f"{where}: busbw {reported} does not follow from size and time "
                            f"({computed:.3g} GB/s expected); is the ranks count right?")  # fmt: skip
    if reported > 0:
        row["busbw_GBps"] = reported
        row["algbw_GBps"] = _number(metrics["algbw"], where, "algbw")


def _text_evidence(run: _Run) -> tuple[list[Bandwidths], set[int], set[str]]:
    """Bandwidths, roots and reductions of the run's well-formed rows, for :func:`infer_op`."""
    bandwidths, roots, redops = [], set(), set()
    for _, raw in run.pending:
        tokens = _fields(run, raw)
        if len(tokens) != len(run.columns):
            continue  # malformed: reported when the row itself is read
        fields = dict(zip(_leading(run), tokens, strict=False))
        if re.fullmatch(r"-?\d+", fields.get("root", "")):
            roots.add(int(fields["root"]))
        if "redop" in fields:
            redops.add(fields["redop"])
        for metrics in _blocks(run, tokens):
            with contextlib.suppress(ValueError, KeyError):
                algbw, busbw = metrics["algbw"], metrics["busbw"]
                bandwidths.append(Bandwidths(float(algbw), float(busbw), half_unit(algbw), half_unit(busbw)))
    return bandwidths, roots, redops


_FIELD = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|N/A|[A-Za-z_]\w*")
_GLUED = re.compile(r"[-+]?[\d.]+([eE][-+]?\d+)?[^\d\s.].*")  # a number with a message glued on


def _cut_short(run: _Run, tokens: list[str]) -> str | None:
    """Why a last row looks cut short, else None: fewer fields than the header announced, or text
    glued onto a field with no well-formed fields after it (a launcher's message appended to the
    half-written row: ``1.40slurmstepd: error: *** JOB 1234 ... DUE TO TIME LIMIT ***``)."""
    fields = _fields(run, tokens)
    if len(fields) < len(run.columns):
        return f"{len(fields)} of {len(run.columns)} fields"
    bad = next((i for i, token in enumerate(fields) if not _FIELD.fullmatch(token)), None)
    if (
        bad is None
        or not _GLUED.fullmatch(fields[bad])
        or all(_FIELD.fullmatch(t) for t in fields[bad + 1 :])
    ):
        return None
    return f"text glued onto field {bad + 1}: {' '.join(fields[bad:])[:40]!r}"


def _run_rows(
    run: _Run, source: str, repeats: dict[str, int], last_data: int, warn: Warn
) -> list[dict[str, Any]]:
    """The rows of a finished run; the file's last data row, cut short, is dropped with a warning
    naming its line (every other malformed row is an error)."""
    if not run.pending:
        return []
    first = f"{source}:{run.pending[0][0]}"
    if not run.columns:
        raise TrainsimError(f"{first}: a data row before any column header ('#  size  count ...')")
    physical_range("ranks").check(run.ranks, f"{first}: the header's rank count")
    op = run.op or infer_op(run.ranks, *_text_evidence(run), where=first)
    repeats[op] = repeat = repeats.get(op, -1) + 1
    rows: list[dict[str, Any]] = []
    for lineno, tokens in run.pending:
        where = f"{source}:{lineno}"
        cut = _cut_short(run, tokens) if lineno == last_data else None
        if cut is not None:
            warn(f"{where}: dropped the last row, cut short ({cut}): the log ends mid-row, as a job stopped "
                 "by its time limit leaves it; the complete rows before it are kept")  # fmt: skip
            continue
        rows += _data_rows(run, op, tokens, where, repeat, source)
    return rows


def _is_data(body: str) -> bool:
    return body[:1].isdigit() and body.split()[0].isdigit()


def parse_text(
    text: str, *, source: str = "<text>", op: str | None = None, warn: Warn | None = None
) -> list[dict[str, Any]]:
    """Every result row of nccl-tests text output (one or several runs) as tidy rows.

    The collective comes from ``op``, the source's name, the log's "Collective test starting" line,
    or else its rows (:mod:`calibrate.nccl_tests.evidence`). ``warn`` receives one line per
    recoverable problem (default: printed on stderr as ``warning: ...``).
    """
    warn = warn or _print_warning
    lines = [line.strip() for line in text.splitlines()]
    last_data = max((n for n, body in enumerate(lines, 1) if _is_data(body)), default=0)
    rows: list[dict[str, Any]] = []
    repeats: dict[str, int] = {}
    run = _Run(op=op or op_from_program(source))
    for lineno, body in enumerate(lines, 1):
        if not body:
            continue
        if body.startswith("#"):
            if (_STARTING.match(body) or _NTHREAD.match(body)) and run.pending:
                rows += _run_rows(run, source, repeats, last_data, warn)  # a new run starts in the same file
                run = _Run(op=op or op_from_program(source))
            _header_line(run, body, f"{source}:{lineno}")
            continue
        tokens = body.split()
        if not _is_data(body):
            if run.columns and re.fullmatch(r"[\d.eE+-]+", tokens[0]):
                raise TrainsimError(f"{source}:{lineno}: size {tokens[0]!r} is not a whole number of bytes")
            continue  # launcher or NCCL INFO chatter between tables
        run.pending.append((lineno, tokens))
    rows += _run_rows(run, source, repeats, last_data, warn)
    if not rows:
        raise TrainsimError(f"{source}: no nccl-tests result rows found")
    return rows


# --- parsing -J JSON ------------------------------------------------------------------------


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
                count=int(count), dtype=_TYPES.get(str(dtype), str(dtype)), backend="nccl", in_place=in_place,
                source=source, wrong=None if wrong is None else _json_number(wrong, f"{where}.{key}.nwrong"),
                device=device,
            ))  # fmt: skip
    if not rows:
        raise TrainsimError(f"{source}: the nccl-tests JSON report has no results")
    return rows


def parse_file(path: str | Path, *, op: str | None = None, warn: Warn | None = None) -> list[dict[str, Any]]:
    """Rows of one nccl-tests capture, text or ``-J`` JSON (told apart by content), in UTF-8 or
    UTF-16 (:func:`calibrate.nccl_tests.capture.read_capture`)."""
    p = Path(path)
    text = read_capture(p)
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrainsimError(f"{p}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise TrainsimError(f"{p}: JSON nested too deeply to be an nccl-tests report") from None
        return parse_json(data, source=str(p), op=op)
    return parse_text(text, source=str(p), op=op, warn=warn)


def write_rows(rows: Iterable[Mapping[str, Any]], out: str | Path) -> int:
    count = 0
    with RecordWriter(out, fieldnames=COLLECTIVE_FIELDS) as writer:
        for row in rows:
            writer.write(row)
            count += 1
    return count


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m calibrate.nccl_tests", description=__doc__.split("\n")[0]
    )
    parser.add_argument("captures", nargs="+", help="nccl-tests stdout captures or -J JSON files")
    parser.add_argument("-o", "--out", required=True, help="tidy rows to append to (.jsonl or .csv)")
    parser.add_argument(
        "--op", choices=sorted(set(_PROGRAM_OPS.values())), help="the collective, if the file does not say"
    )
    args = parser.parse_args(argv)
    rows = [row for path in args.captures for row in parse_file(path, op=args.op)]
    count = write_rows(rows, args.out)
    print(f"{count} rows from {len(args.captures)} capture(s) appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
