"""The flags of ``python -m experiments.validate``: its parser alone, which ``--help`` builds without
importing the calibration jobs or the simulator (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_out

__all__ = ["COMMITTED", "DESCRIPTION", "build_parser"]

COMMITTED = "experiments/results/validation"  # the committed full run: its measurements are never rewritten
DESCRIPTION = "Predicted against measured step time, on real training runs of this machine."


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.validate", description=DESCRIPTION)
    p.add_argument(
        "--quick", action="store_true", help="CI: 2 processes, tiny CNN, DDP + PS sync, no testbed"
    )
    add_out(p, "the calibration, the runs and the report", default_new=True)
    p.add_argument(
        "--measured", default=None, metavar="DIR",
        help=f"re-predict the measurements in DIR (read only), e.g. {COMMITTED}",
    )  # fmt: skip
    p.add_argument(
        "--in-place", action="store_true",
        help="with --measured: rewrite the report inside DIR (its measurements are only read)",
    )  # fmt: skip
    p.add_argument("--no-testbed", action="store_true", help="skip the emulated-node runs")
    p.add_argument("--notes", default=None, help="markdown file of analysis to put in the report")
    return p
