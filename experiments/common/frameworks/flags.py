"""The ``--from`` flag and the frameworks' names, without importing the readers (a command's
``--help`` builds its parser from these alone; :mod:`experiments.common.frameworks.wiring` reads
the configs)."""

from __future__ import annotations

import argparse

__all__ = ["FRAMEWORK_NAMES", "add_from"]

# the frameworks read (--from) and written (plan --emit); a test holds these equal to
# experiments.common.frameworks.settings.FRAMEWORKS and emit.EMITTERS
FRAMEWORK_NAMES = ("megatron", "torchtitan", "deepspeed")


def add_from(parser: argparse.ArgumentParser) -> None:
    """``--from FRAMEWORK CONFIG`` (read by :func:`~experiments.common.frameworks.wiring.expand_from`
    before argparse sees the rest)."""
    parser.add_argument(
        "--from", nargs=2, metavar=("FRAMEWORK", "CONFIG"), dest="from_framework",
        help="take model, layout, batch, precision, recompute and optimizer from a framework config: "
        "megatron \"ARGS\" (or a file of them), torchtitan FILE.toml, deepspeed FILE.json; "
        "flags given here override it",
    )  # fmt: skip
