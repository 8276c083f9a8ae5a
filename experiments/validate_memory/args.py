"""The flags of ``python -m experiments.validate_memory``: its parser alone, which ``--help`` builds
without importing the memory model, torch's trackers or the step model
(:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_out, add_quiet, int_list, name_list

__all__ = ["DESCRIPTION", "FULL_MODELS", "QUICK_MODELS", "SOURCES", "build_parser"]

DESCRIPTION = "Per-rank memory: the simulator's memory model against PyTorch's own accounting."
QUICK_MODELS = ("gpt2-tiny", "resnet-tiny")
FULL_MODELS = ("gpt2-small", "bert-base", "resnet50")
SOURCES = ("import", "preset")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m experiments.validate_memory", description=DESCRIPTION)
    parser.add_argument(
        "--quick", action="store_true", help=f"models {','.join(QUICK_MODELS)} at W = 1, 2, 4 (CI)"
    )
    parser.add_argument("--models", help=f"comma list (default {','.join(FULL_MODELS)})")
    parser.add_argument(
        "--strategies", type=name_list(("ddp", "fsdp"), what="strategy"), default="ddp,fsdp",
        help="comma list of ddp, fsdp",
    )  # fmt: skip
    parser.add_argument(
        "--world-sizes", type=int_list(1, 4096, max_items=16), default=None,
        help="comma list (default 1,2,4,8,16,32,64)",
    )  # fmt: skip
    parser.add_argument(
        "--optimizer", default="adamw", choices=("adamw", "sgd", "sgd-momentum"), help="optimizer"
    )
    parser.add_argument(
        "--sources", type=name_list(SOURCES, what="source"), default="import,preset",
        help="simulator workloads: import, preset",
    )  # fmt: skip
    parser.add_argument(
        "--measured", help="JSONL of calibrate.memory_truth records instead of measuring here"
    )
    add_out(parser, "the records, comparison, markdown report and plots", default_new=False)
    add_quiet(parser)
    return parser
