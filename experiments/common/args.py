"""Flags the studies share beyond the generic ones: strategy lists and the training shape."""

from __future__ import annotations

import argparse

from simcore.cliargs import int_range, name_list

__all__ = ["MAX_BATCH", "add_batch", "add_strategies", "strategy_names"]

# 2**30 samples: far beyond any published global batch (LLaMA 2: 4 M tokens = 1024 sequences).
MAX_BATCH = 2**30


def strategy_names() -> list[str]:
    """Every strategy a what-if can run: the synchronous ones, then the parameter-server modes."""
    from simcore.whatif.sweep import all_strategy_names

    return all_strategy_names()


def add_strategies(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--strategies",
        type=name_list(strategy_names, what="strategy"),
        default=default,
        help="comma list of strategies: " + ", ".join(strategy_names()),
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
