"""The flags of ``python -m calibrate.gpu_suite``: its parser alone, light enough that ``--help``
answers without importing the simulator's step model (which the prediction side needs)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from calibrate.gpu_suite.plan import KINDS, RECORDS, TABLE
from simcore.cliargs import Parser, int_range, name_list

__all__ = ["DESCRIPTION", "answer_help", "build_parser"]

DESCRIPTION = (
    "One prepared run on one GPU that measures what trainsim's compute model needs, then a "
    "predicted-vs-measured table."
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m calibrate.gpu_suite", description=DESCRIPTION)
    p.add_argument("--out", default=None, help=f"folder for {RECORDS} and {TABLE}")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (seconds; automatic without a GPU)")
    p.add_argument("--budget-s", type=int_range(1, 86_400), default=480,
                   help="stop measuring after this many seconds (later items recorded as skipped)")  # fmt: skip
    p.add_argument("--kinds", type=name_list(KINDS, what="kind"), default=",".join(KINDS),
                   help=f"what to measure, comma-separated from {', '.join(KINDS)} (default: all)")  # fmt: skip
    p.add_argument("--force", action="store_true", help=f"append to the {RECORDS} already in --out")
    p.add_argument("--table", default=None, metavar="DIR",
                   help=f"measure nothing: rebuild DIR/{TABLE} from DIR/{RECORDS}")  # fmt: skip
    return p


def answer_help(argv: Sequence[str]) -> None:
    """Print the help and exit (``SystemExit(0)``) where ``argv`` asks for it (before a ``--``);
    return otherwise, so the command's ``main`` parses (and reports bad input) as it always does."""
    options = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    if "-h" in options or "--help" in options:
        build_parser().print_help()
        raise SystemExit(0)
