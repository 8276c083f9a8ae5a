"""The flags of ``python -m experiments.validate_parallel``: its parser alone, which ``--help`` builds
without importing the parallel layouts (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_format

__all__ = ["DESCRIPTION", "build_parser"]

DESCRIPTION = "Predicted vs published throughput of Megatron-LM's tensor/pipeline/3-D parallel runs."


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m experiments.validate_parallel", description=DESCRIPTION)
    parser.add_argument(
        "--only", default="", help="keep rows whose config starts with this prefix (default: all)"
    )
    add_format(parser, ("table", "json"))
    return parser
