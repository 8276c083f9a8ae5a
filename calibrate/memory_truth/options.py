"""What ``calibrate.memory_truth`` measures: names and bounds only, so ``--help`` needs no torch."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from simcore.cliargs import name_list
from simcore.errors import TrainsimError

__all__ = ["MAX_WORLD", "MODEL_NAMES", "OPTIMIZERS", "STRATEGIES", "WORLD_SIZES", "parse_list"]

# The keys of calibrate.memory_truth.models.MODELS (a test checks they agree).
MODEL_NAMES = ("gpt2-small", "bert-base", "resnet50", "gpt2-tiny", "resnet-tiny")
STRATEGIES = ("ddp", "fsdp")
OPTIMIZERS = ("adamw", "sgd", "sgd-momentum")  # the simulator's names (simcore.strategies.base.OPTIMIZERS)
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_WORLD = 4096  # ranks of the fake group, which one process plays rank 0 of (no memory per rank)


def parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma list whose items must be in ``allowed`` (``what`` names the flag in the error)."""
    try:
        return list(name_list(allowed, what=what.lstrip("-").rstrip("s"))(text))
    except argparse.ArgumentTypeError as exc:
        raise TrainsimError(f"{what}: {exc}") from None
