"""What one ``calibrate.train`` run is: its configuration, the checks on it, and its run id.

Torch-free, so the command line can refuse bad options before torch is imported; the command line
(:mod:`calibrate.train.cli`) and the per-rank body (:mod:`calibrate.train.loop`) both read it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from simcore.errors import TrainsimError

__all__ = ["ALL_STRATEGIES", "MODEL_NAMES", "TrainConfig", "check_config", "check_world", "new_run_id"]

ALL_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "ps-sync", "ps-async", "ps-ssp")
MODEL_NAMES = ("cnn", "transformer")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """One training run (sizes per worker; times in seconds)."""

    out: str
    model: str = "cnn"
    strategy: str = "ddp"
    steps: int = 20
    batch: int = 16
    lr: float = 0.1
    momentum: float = 0.9
    seed: int = 0
    width: int = 16
    depth: int = 2
    heads: int = 2
    seq_len: int = 32
    vocab: int = 64
    image_size: int = 16
    num_classes: int = 10
    noise: float = 1.0
    threads: int | None = None
    staleness_bound: int = 2
    ps_ranks: int = 1
    slow_rank: int = -1
    slow_factor: float = 1.0
    eval_every: int = 10
    warmup: int = 2
    checkpoint_every: int = 10
    backend: str | None = None
    timeout_s: float = 900.0
    resume: bool = False
    force: bool = False  # append a new run to a file that already holds records

    def identity(self) -> dict[str, Any]:
        """What makes two runs the same run (everything but how it was started)."""
        return {k: v for k, v in asdict(self).items() if k not in ("resume", "force", "timeout_s")}


def check_config(config: TrainConfig) -> None:
    """TrainsimError naming the first option out of its range."""
    if config.strategy not in ALL_STRATEGIES:
        raise TrainsimError(f"unknown strategy {config.strategy!r}; allowed: {', '.join(ALL_STRATEGIES)}")
    if config.model not in MODEL_NAMES:
        raise TrainsimError(f"unknown model {config.model!r}; allowed: {', '.join(MODEL_NAMES)}")
    for name in ("steps", "batch", "width", "depth", "heads", "seq_len", "vocab", "image_size", "ps_ranks"):
        if getattr(config, name) < 1:
            raise TrainsimError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
    for name in ("staleness_bound", "eval_every", "warmup", "checkpoint_every"):
        if getattr(config, name) < 0:
            raise TrainsimError(f"--{name.replace('_', '-')} must not be negative")
    if config.lr <= 0 or not 0 <= config.momentum < 1 or config.timeout_s <= 0:
        raise TrainsimError("--lr and --timeout-s must be positive and --momentum in [0, 1)")
    if config.threads is not None and config.threads < 1:
        raise TrainsimError(f"--threads must be at least 1, got {config.threads}")
    if config.model == "cnn" and config.num_classes < 2:
        raise TrainsimError("--num-classes must be at least 2")


def check_world(config: TrainConfig, world: int) -> None:
    """TrainsimError when ``config`` cannot run on ``world`` processes."""
    if config.strategy.startswith("ps-") and world <= config.ps_ranks:
        raise TrainsimError(
            f"{config.strategy} with --ps-ranks {config.ps_ranks} needs at least {config.ps_ranks + 1} "
            f"processes (servers + at least one worker); got {world}; run under torchrun --nproc-per-node"
        )
    if config.slow_rank >= world:
        raise TrainsimError(f"--slow-rank {config.slow_rank} is not a rank of a world of {world}")


def new_run_id(config: TrainConfig, world: int) -> str:
    """A fresh id naming the model, strategy, world size and start time."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{config.model}-{config.strategy}-w{world}-{stamp}-{uuid.uuid4().hex[:6]}"
