"""The flags of ``python -m experiments.reproduce_paper``: its parser alone, which ``--help`` builds
without importing the claims or the simulator (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_format, add_out, add_quiet

__all__ = ["DESCRIPTION", "FORMATS", "build_parser"]

DESCRIPTION = (
    "The claims of the seed study and of the hardware article against the simulator, claim by claim."
)
# experiments.reproduce_paper.report.FORMATS, literal so that --help imports no report (a test holds
# them equal)
FORMATS = ("table", "json", "markdown")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m experiments.reproduce_paper", description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="the small CI setting (a few seconds)")
    parser.add_argument(
        "--regions", action="store_true",
        help="also sweep fabric x model x GPU count and say where each ratio claim holds (text)",
    )  # fmt: skip
    add_format(parser, FORMATS)
    add_out(parser, "the report in every format", default_new=False)
    add_quiet(parser)
    return parser
