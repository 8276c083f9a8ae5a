"""Checkpoints of ``calibrate.train``: where they live, writing one atomically, the step to resume at.

Checkpoints live in ``<out without suffix>.ckpt/<run_id>/step<N>.rank<R>.pt`` (``N`` steps done);
the newest two per rank are kept, so a rank killed while writing never leaves its peers without a
common step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from calibrate.common.dist import DistContext
from calibrate.train.config import TrainConfig

__all__ = ["checkpoint_dir", "checkpoint_path", "common_step", "save_checkpoint", "saved_steps"]


def checkpoint_dir(config: TrainConfig, run_id: str) -> Path:
    out = Path(config.out.replace("{rank}", "all"))
    return out.with_suffix(".ckpt") / run_id


def checkpoint_path(directory: Path, step: int, rank: int) -> Path:
    return directory / f"step{step}.rank{rank}.pt"


def saved_steps(directory: Path, rank: int) -> list[int]:
    """Steps this rank has a checkpoint of, oldest first."""
    if not directory.is_dir():
        return []
    suffix = f".rank{rank}.pt"
    return sorted(int(p.name[4 : -len(suffix)]) for p in directory.glob(f"step*{suffix}"))


def save_checkpoint(directory: Path, rank: int, step: int, state: Any) -> None:
    """Write this rank's ``state`` for ``step`` (atomic rename), keeping the newest two."""
    directory.mkdir(parents=True, exist_ok=True)
    target = checkpoint_path(directory, step, rank)
    tmp = target.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, target)
    for old in saved_steps(directory, rank)[:-2]:
        checkpoint_path(directory, old, rank).unlink(missing_ok=True)


def common_step(directory: Path, ctx: DistContext, has_state: bool) -> int:
    """Newest step every stateful rank has a checkpoint of (0 when none); call on every rank."""
    mine = saved_steps(directory, ctx.rank) if has_state else None
    everyone: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    sets = [set(steps) for steps in everyone if steps is not None]
    common = set.intersection(*sets) if sets else set()
    return max(common, default=0)
