"""The flags of ``python -m experiments.staleness_accuracy``: its parser alone, which ``--help``
builds without importing the trainer, the staleness model or the simulator
(:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from experiments.staleness_accuracy.data import DATASETS
from simcore.cliargs import Parser, add_out, add_quiet, int_list, int_range, name_list, real_range
from topologies.cliargs import add_cluster

__all__ = ["DESCRIPTION", "MAX_DELAY", "MAX_WORKERS", "NORMAL", "QUICK", "StudySize", "build_parser"]

DESCRIPTION = (
    "What stale gradients cost in accuracy and in time to accuracy: real SGD with delayed gradients."
)


@dataclass(frozen=True, slots=True)
class StudySize:
    """How much to train: fixed delays, seeds per setting, passes over the training set."""

    delays: str
    seeds: int
    epochs: int


NORMAL = StudySize("0,1,2,4,8,16", seeds=5, epochs=20)
QUICK = StudySize("0,2,8", seeds=2, epochs=6)
TARGET_FRACTION_OF_SYNC = 0.97
MAX_DELAY = 1000  # server versions; the penalty study's largest delay is 32
# Workers of the simulated parameter server: simulated per rank, its cost grows ~x11 per doubling
# past 64 (one ps-async run of GPT-2 XL: 1.5 s at 64 workers, 19 s at 128, 216 s at 256).
MAX_WORKERS = 128

# A learning rate: 1e-12 is below any optimiser's useful step (fp32 rounds it away) and a denormal
# 1e-320 would train nothing; 1e6 diverges at once.
positive_float = real_range(1e-12, 1e6)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected an accuracy between 0 and 1, got {text!r}")
    return value


def _mode(text: str) -> str:
    return text.strip().lower().removeprefix("ps-")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m experiments.staleness_accuracy", description=DESCRIPTION)
    add = parser.add_argument
    add("--quick", action="store_true", help="small setting for CI: delays 0,2,8, 2 seeds, 6 epochs")
    add("--dataset", default="digits", choices=list(DATASETS), help="training task")
    add(
        "--delays", type=int_list(0, MAX_DELAY), default=None,
        help=f"(a) fixed delays in server versions, comma-separated (default {NORMAL.delays})",
    )  # fmt: skip
    add(
        "--modes", type=name_list(("async", "mitigated"), what="mode", normalize=_mode),
        default="async,mitigated", help="modes for fixed and measured delays: async, mitigated",
    )  # fmt: skip
    add(
        "--measured",
        action="append",
        default=[],
        metavar="FILE",
        help="(c) staleness file (calibrate.train JSONL or JSON list)",
    )
    add_cluster(
        parser, None,
        help="(b) cluster preset or file for the parameter-server simulation; also sets the time per update",
    )  # fmt: skip
    add(
        "--gpus", type=int_range(1, MAX_WORKERS), default=8,
        help="(b) number of workers of the parameter-server simulation",
    )  # fmt: skip
    add(
        "--ps-modes", type=name_list(("async", "ssp", "mitigated"), what="mode", normalize=_mode),
        default="async,ssp,mitigated", help="(b) simulated modes: async, ssp, mitigated",
    )  # fmt: skip
    add(
        "--staleness-bounds",
        type=int_list(0, MAX_DELAY, max_items=16),
        default="1,2,4",
        help="(b) SSP bounds",
    )
    add("--seeds", type=int_range(1, 100), help=f"seeds per setting (default {NORMAL.seeds})")
    add("--epochs", type=int_range(1, 1000), help=f"passes over the training set (default {NORMAL.epochs})")
    add("--lr", type=positive_float, default=0.1, help="SGD learning rate")
    add("--batch-size", type=int_range(1, 65536), default=32, help="samples per server update")
    add("--hidden", type=int_range(0, 4096), default=32, help="hidden units; 0 = softmax regression")
    add(
        "--target",
        type=fraction,
        help=f"target test accuracy, 0..1 (default {100 * TARGET_FRACTION_OF_SYNC:.0f}%% of sync's final)",
    )
    add(
        "--step-time",
        action="append",
        default=[],
        metavar="MODE=TIME",
        help="time per server update of a mode, e.g. async=72ms (overrides the simulated time of --cluster)",
    )
    add_out(parser, "report.md, plots and results.json", default_new=False)
    add(
        "--fit-penalty",
        type=Path,
        metavar="FILE",
        help="run the penalty study and write its coefficients JSON (an existing file needs --force)",
    )
    add_quiet(parser)
    return parser
