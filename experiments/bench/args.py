"""The flags of ``python -m experiments.bench``: its parser alone, which ``--help`` builds without
importing the simulator (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_format, add_quiet, int_list, int_range, size_bytes

__all__ = ["ALGO_CHOICES", "DESCRIPTION", "MAX_GPUS", "build_parser"]

DESCRIPTION = (
    "How fast the simulator itself runs: wall time and simulated events per collective, by GPU count."
)
# Kept literal so --help imports neither the collectives nor the topologies; a test holds them equal
# to the algorithms that run both all_reduce and all_gather or either (simcore.collectives.ALGORITHMS)
# and to topologies.cliargs.MAX_GPUS.
ALGO_CHOICES = ["collnet_direct", "direct", "hierarchical", "nvls", "nvls_tree", "pat", "ring", "tree"]
MAX_GPUS = 32768


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m experiments.bench", description=DESCRIPTION)
    parser.add_argument(
        "--gpus", type=int_list(1, MAX_GPUS, max_items=16), default=None,
        help="comma-separated GPU counts (default 8,64,512,4096)",
    )  # fmt: skip
    parser.add_argument("--size", type=size_bytes(), default="1GiB", help="collective size")
    parser.add_argument("--algo", default="ring", choices=ALGO_CHOICES, help="collective algorithm")
    parser.add_argument(
        "--repeats", type=int_range(1, 100), default=3, help="runs per row; the median is reported"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (for tests)")
    add_format(parser, ("table", "json"))
    parser.add_argument("--profile", action="store_true", help="also profile the largest all_reduce")
    parser.add_argument(
        "--what-if",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the default what-if, Llama-2-7B FSDP steps at 16/128/1024 GPUs and a 3-D "
        "parallel Llama-2-70B step on 1024 GPUs (default: on, off with --quick)",
    )
    parser.add_argument(
        "--planner",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the planner: fast path, fixed sweep, plan, start-up (default: on, off with --quick)",
    )
    parser.add_argument("--ray", action="store_true", help="with --planner, also run the sweep as Ray tasks")
    add_quiet(parser)
    return parser
