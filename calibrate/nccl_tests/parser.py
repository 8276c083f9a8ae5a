"""``python -m calibrate.nccl_tests``: real nccl-tests logs become the tidy rows our own job writes.

    python -m calibrate.nccl_tests all_reduce.txt sendrecv.json slurm-1234.out -o runs/nccl.jsonl

``calibrate.collectives`` prints its sweep in nccl-tests' layout and writes one tidy row per
(op, size, group, repeat) (:mod:`calibrate.nccl_tests.table`); this command reads real nccl-tests
output into the same rows, so a cluster measured with ``all_reduce_perf`` is fitted exactly like
one measured with our job. Files are taken as users have them: text of every nccl-tests version
(:mod:`calibrate.nccl_tests.text_log`) or ``-J`` JSON (:mod:`calibrate.nccl_tests.json_log`), told
apart by content; a name that does not say the collective (a Slurm ``slurm-1234.out``) when the
log's header or rows tell it (:mod:`calibrate.nccl_tests.evidence`); a log cut mid-row by a time
limit, keeping its complete rows with a warning naming the line dropped; a capture saved by Windows
PowerShell (UTF-16, :mod:`calibrate.nccl_tests.capture`). Malformed input is one ``error:`` line
naming the file and line, status 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from calibrate.common.records import RecordWriter, distinct_files
from calibrate.nccl_tests.capture import read_capture
from calibrate.nccl_tests.evidence import OPS
from calibrate.nccl_tests.json_log import parse_json
from calibrate.nccl_tests.table import (
    COLLECTIVE_FIELDS,
    Warn,
    collective_row,
    format_float,
    format_table_header,
    format_table_row,
    op_from_program,
    program_name,
)
from calibrate.nccl_tests.text_log import parse_text
from simcore.cliargs import Parser, output_file
from simcore.errors import TrainsimError, cli_entry
from simcore.output import OutLock

__all__ = [
    "COLLECTIVE_FIELDS",
    "collective_row",
    "format_float",
    "format_table_header",
    "format_table_row",
    "main",
    "op_from_program",
    "parse_file",
    "parse_json",
    "parse_text",
    "program_name",
    "write_rows",
]


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
    parser = Parser(prog="python -m calibrate.nccl_tests", description=__doc__.split("\n")[0])
    parser.add_argument("captures", nargs="+", help="nccl-tests stdout captures or -J JSON files")
    parser.add_argument("-o", "--out", required=True, help="tidy rows to append to (.jsonl or .csv)")
    parser.add_argument("--op", choices=sorted(OPS), help="the collective, if the file does not say")
    args = parser.parse_args(argv)
    output_file(args.out, force=True)  # appended to, so it may exist; a folder or unwritable place may not
    captures = distinct_files([Path(c) for c in args.captures], "an nccl-tests log", quiet=False)
    rows = [row for path in captures for row in parse_file(path, op=args.op)]
    with OutLock.for_file(args.out):  # one writer: two runs appending at once would interleave rows
        count = write_rows(rows, args.out)
    print(f"{count} rows from {len(captures)} capture(s) appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
