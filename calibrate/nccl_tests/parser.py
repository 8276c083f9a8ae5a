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
Malformed input raises :class:`TrainsimError` naming the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate.common.records import RecordWriter
from simcore.calibration.profile import busbw_factor
from simcore.cliargs import Parser
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
    "algbw_GBps", "busbw_GBps", "wrong", "repeat", "source",
)  # fmt: skip

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
    r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)"
)
_NTHREAD = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_METRICS = {"time", "cputime", "algbw", "busbw", "#wrong", "error", "i_min", "i_max", "i_p99", "i_cv%"}


@dataclass
class _Run:
    """What one nccl-tests run said about itself before and during its table."""

    op: str | None
    program_line: int = 0
    threads_gpus: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    devices: dict[int, str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return len(self.hosts) or self.threads_gpus or 1

    @property
    def ranks_per_node(self) -> int:
        if not self.hosts:
            return self.ranks
        counts = [list(self.hosts.values()).count(h) for h in dict.fromkeys(self.hosts.values())]
        return max(counts)


def _number(token: str, where: str, what: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise TrainsimError(f"{where}: {what} {token!r} is not a number") from None


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
            run.columns = tokens


def _data_line(run: _Run, tokens: list[str], where: str, repeat: int, source: str) -> None:
    if not run.columns:
        raise TrainsimError(f"{where}: a data row before any column header ('#  size  count ...')")
    if run.op is None:
        raise TrainsimError(f"{where}: cannot tell which collective this is; name the file after the "
                            "nccl-tests program (e.g. all_reduce_perf.txt) or pass --op")  # fmt: skip
    leading = [c for c in run.columns if c not in _METRICS]
    block_width = _block_width(run.columns)
    if len(tokens) != len(run.columns):
        raise TrainsimError(f"{where}: {len(tokens)} fields, the header announced {len(run.columns)} "
                            f"({' '.join(run.columns)})")  # fmt: skip
    fields = dict(zip(leading, tokens[: len(leading)], strict=True))
    size = _number(fields["size"], where, "size")
    if size != int(size) or size < 0:
        raise TrainsimError(f"{where}: size {fields['size']!r} is not a whole number of bytes")
    blocks = run.blocks or ["out-of-place", "in-place"]
    for b, start in enumerate(range(len(leading), len(tokens), block_width)):
        metrics = dict(
            zip(run.columns[start : start + block_width], tokens[start : start + block_width], strict=True)
        )
        time_key = "time" if "time" in metrics else "cputime"
        wrong_text = metrics.get("#wrong", metrics.get("error", "N/A"))
        run.rows.append(collective_row(
            op=run.op, size_bytes=int(size), ranks=run.ranks, ranks_per_node=run.ranks_per_node,
            time_us_mean=_number(metrics[time_key], where, "time"),
            count=int(_number(fields.get("count", "0"), where, "count")),
            dtype=_TYPES.get(fields.get("type", ""), fields.get("type")), backend="nccl",
            in_place=blocks[min(b, len(blocks) - 1)] == "in-place", repeat=repeat, source=source,
            wrong=None if wrong_text == "N/A" else _number(wrong_text, where, "#wrong"),
        ))  # fmt: skip
        _keep_reported_bandwidth(run.rows[-1], metrics, where)


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


def parse_text(text: str, *, source: str = "<text>", op: str | None = None) -> list[dict[str, Any]]:
    """Every result row of nccl-tests text output (one or several runs) as tidy rows."""
    rows: list[dict[str, Any]] = []
    run = _Run(op=op or op_from_program(source))
    repeats: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{lineno}"
        body = line.strip()
        if not body:
            continue
        if body.startswith("#"):
            if (_STARTING.match(body) or _NTHREAD.match(body)) and run.rows:
                rows += run.rows  # a new run starts in the same file
                run = _Run(op=op or op_from_program(source))
            _header_line(run, body, where)
            continue
        tokens = body.split()
        if not tokens[0].isdigit():
            if run.columns and re.fullmatch(r"[\d.eE+-]+", tokens[0]):
                raise TrainsimError(f"{where}: size {tokens[0]!r} is not a whole number of bytes")
            continue  # launcher or NCCL INFO chatter between tables
        if not run.rows:
            repeats[str(run.op)] = repeats.get(str(run.op), -1) + 1
        _data_line(run, tokens, where, repeats[str(run.op)], source)
    rows += run.rows
    if not rows:
        raise TrainsimError(f"{source}: no nccl-tests result rows found")
    return rows


# --- parsing -J JSON ------------------------------------------------------------------------


def parse_json(data: Any, *, source: str = "<json>", op: str | None = None) -> list[dict[str, Any]]:
    """Rows of nccl-tests' ``-J`` report (``results[].out_of_place / in_place``)."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise TrainsimError(f"{source}: not an nccl-tests JSON report (no 'results' list)")
    args = data.get("args") or [""]
    op = op or op_from_program(str(args[0])) or op_from_program(source)
    if op is None:
        raise TrainsimError(
            f"{source}: cannot tell which collective this is (args[0]={args[0]!r}); pass --op"
        )
    config: dict[str, Any] = data["config"] if isinstance(data.get("config"), dict) else {}
    devices = config.get("devices") or []
    hosts = [str(d.get("hostname", "")) for d in devices if isinstance(d, dict)]
    ranks = len(hosts) or int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    per_node = max((hosts.count(h) for h in set(hosts)), default=ranks)
    rows = []
    for i, result in enumerate(data["results"]):
        where = f"{source}: results[{i}]"
        if not isinstance(result, dict) or "size" not in result:
            raise TrainsimError(f"{where}: expected an object with 'size'")
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            block = result.get(key)
            if block is None:
                continue
            time_us = block.get("time", block.get("cpu_time"))
            if not isinstance(time_us, (int, float)) or isinstance(time_us, bool):
                raise TrainsimError(f"{where}.{key}.time: expected a number, got {time_us!r}")
            rows.append(collective_row(
                op=op, size_bytes=int(result["size"]), ranks=ranks, ranks_per_node=per_node,
                time_us_mean=float(time_us), count=int(result.get("count", 0)),
                dtype=_TYPES.get(str(result.get("type")), result.get("type")), backend="nccl",
                in_place=in_place, source=source, wrong=block.get("nwrong"),
            ))  # fmt: skip
    if not rows:
        raise TrainsimError(f"{source}: the nccl-tests JSON report has no results")
    return rows


def parse_file(path: str | Path, *, op: str | None = None) -> list[dict[str, Any]]:
    """Rows of one nccl-tests capture, text or ``-J`` JSON (told apart by content)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise TrainsimError(f"{p}: no such file") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrainsimError(f"{p}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
        return parse_json(data, source=str(p), op=op)
    return parse_text(text, source=str(p), op=op)


def write_rows(rows: Iterable[Mapping[str, Any]], out: str | Path) -> int:
    count = 0
    with RecordWriter(out, fieldnames=COLLECTIVE_FIELDS) as writer:
        for row in rows:
            writer.write(row)
            count += 1
    return count


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m calibrate.nccl_tests", description=__doc__.split("\n")[0])
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
