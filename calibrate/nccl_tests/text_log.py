"""Reading nccl-tests' text output: every version's table, several runs per file, logs cut short.

Accepted: ``#`` header lines, the column header that says which columns this test prints
(``redop``/``root`` are missing in old versions and some tests, old versions print ``error``
instead of ``#wrong``, v2.17 may add per-iteration columns), ``N/A`` for ``#wrong``, values in
``%.1e``, out-of-place and in-place blocks, several runs in one file, the ``# Avg bus bandwidth``
footer, launcher and NCCL INFO chatter between tables. The collective comes from the caller, the
file's name, the "Collective test starting" line, or else the rows
(:mod:`calibrate.nccl_tests.evidence`). A log whose last row is cut short (a job stopped by its
time limit) keeps its complete rows, with a warning naming the line dropped; any other malformed
row is a TrainsimError naming the file and line.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibrate.nccl_tests.evidence import Bandwidths, half_unit, infer_op
from calibrate.nccl_tests.table import NCCL_TYPES, Warn, collective_row, op_from_program, print_warning
from simcore.calibration.ranges import physical_range
from simcore.errors import TrainsimError

__all__ = ["parse_text"]


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
    if (
        (len(tokens) - starts[0]) % width
        or set(tokens[: starts[0]]) & _METRICS
        or not all({"algbw", "busbw"} <= set(b) <= _METRICS and b[0] == tokens[starts[0]] for b in blocks)
    ):
        raise TrainsimError(f"{where}: a column header nccl-tests does not print: {' '.join(tokens)[:80]!r} "
                            "(each block needs time, algbw and busbw, and holds metric columns only)")  # fmt: skip
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
            dtype=NCCL_TYPES.get(fields.get("type", ""), fields.get("type")), backend="nccl",
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
    warn = warn or print_warning
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
