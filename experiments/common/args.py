"""Flags the studies share beyond the generic ones: strategy lists and the training shape."""

from __future__ import annotations

import argparse

from experiments.common.progress import note
from simcore.cliargs import int_range, name_list
from simcore.errors import TrainsimError

__all__ = [
    "ALL_STRATEGIES",
    "MAX_BATCH",
    "MAX_MICRO_STEPS",
    "add_batch",
    "add_strategies",
    "check_micro_steps",
    "count_text",
    "strategy_names",
]

# 2**30 samples: far beyond any published global batch (LLaMA 2: 4 M tokens = 1024 sequences).
MAX_BATCH = 2**30


# simcore.whatif.sweep.all_strategy_names(), literal so that a parser (and --help) imports neither the
# strategies nor the parameter server (tests/experiments/common/test_args.py holds them equal).
ALL_STRATEGIES = (
    "ddp",
    "fsdp",
    "zero1",
    "zero2",
    "zero3",
    "hsdp",
    "ps-sync",
    "ps-async",
    "ps-ssp",
    "ps-mitigated",
)


def strategy_names() -> list[str]:
    """Every strategy a what-if can run: the synchronous ones, then the parameter-server modes."""
    return list(ALL_STRATEGIES)


def add_strategies(parser: argparse.ArgumentParser, default: str | None) -> None:
    """``--strategies``; ``default`` None means every strategy (left None, so a command can tell)."""
    parser.add_argument(
        "--strategies",
        type=name_list(strategy_names, what="strategy"),
        default=default,
        help="comma list of strategies: "
        + ", ".join(strategy_names())
        + ("" if default else " (default: all)"),
    )


def add_batch(parser: argparse.ArgumentParser, *, global_batch: int, micro_batch: int) -> None:
    parser.add_argument(
        "--global-batch", type=int_range(1, MAX_BATCH), default=global_batch,
        help="samples per optimizer step over all GPUs",
    )  # fmt: skip
    parser.add_argument(
        "--micro-batch", type=int_range(1, MAX_BATCH), default=micro_batch,
        help="samples per GPU per forward/backward",
    )  # fmt: skip


# Micro-steps (one forward/backward of one micro-batch on one simulated rank) a run may simulate:
# about 0.4 ms and 12 KB each on one core (GPT-2 XL, what_if --global-batch 8192), so the bound
# is ~40 s and ~1 GB; past NOTE_MICRO_STEPS (~2 s) the command says how much it will simulate.
MAX_MICRO_STEPS = 100_000
NOTE_MICRO_STEPS = 5_000


def count_text(n: float) -> str:
    """``15600000`` -> ``'15.6 M'``: a count a reader takes in at a glance."""
    for size, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n:.0f}"


def check_micro_steps(work: int, why: str, *, quiet: bool) -> None:
    """Refuse more than :data:`MAX_MICRO_STEPS`; say how much when over :data:`NOTE_MICRO_STEPS`.

    ``why`` says where the count comes from (batch over micro-batch, steps, points).
    """
    if work > MAX_MICRO_STEPS:
        raise TrainsimError(
            f"this would simulate {count_text(work)} micro-steps ({why}); at most "
            f"{count_text(MAX_MICRO_STEPS)}: raise --micro-batch, or lower --global-batch or --steps"
        )
    if work > NOTE_MICRO_STEPS:
        note(f"this simulates {count_text(work)} micro-steps ({why})", quiet=quiet)
