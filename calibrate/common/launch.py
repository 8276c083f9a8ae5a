"""Where this process sits in a launched job, from the launcher's environment alone (no torch).

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``; one srun task per
GPU has ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID`` and ``SLURM_NTASKS_PER_NODE`` instead.
Read without importing torch, so a job can check its options and its output on the one rank that
writes before it joins the process group (:mod:`calibrate.common.dist`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from simcore.errors import TrainsimError

__all__ = ["BACKENDS", "launch_env", "launch_rank"]

BACKENDS = ("gloo", "nccl", "mpi", "ucc")  # torch.distributed's process-group backends


def _int_env(env: Mapping[str, str], name: str) -> int:
    text = env[name]
    # Slurm writes per-node counts as "4" or "4(x2)"; the first number is this layout's count.
    match = re.match(r"\s*(\d+)", text)
    if not match:
        raise TrainsimError(f"environment variable {name}={text!r} is not an integer")
    return int(match.group(1))


def launch_env(env: Mapping[str, str] | None = None) -> dict[str, int] | None:
    """Rank layout from torchrun's or Slurm's variables, or ``None`` when no launcher set any.

    Returns ``rank``, ``world_size``, ``local_rank`` and ``local_world_size``.
    """
    env = os.environ if env is None else env
    if "RANK" in env:
        world = _int_env(env, "WORLD_SIZE") if "WORLD_SIZE" in env else 1
        layout = {
            "rank": _int_env(env, "RANK"),
            "world_size": world,
            "local_rank": _int_env(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
            "local_world_size": _int_env(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world,
        }
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world = _int_env(env, "SLURM_NTASKS")
        per_node = "SLURM_NTASKS_PER_NODE" if "SLURM_NTASKS_PER_NODE" in env else "SLURM_TASKS_PER_NODE"
        layout = {
            "rank": _int_env(env, "SLURM_PROCID"),
            "world_size": world,
            "local_rank": _int_env(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            "local_world_size": _int_env(env, per_node) if per_node in env else world,
        }
    else:
        return None
    _check_layout(layout)
    return layout


def _check_layout(layout: Mapping[str, int]) -> None:
    rank, world = layout["rank"], layout["world_size"]
    local_rank, local_world = layout["local_rank"], layout["local_world_size"]
    if world < 1 or not 0 <= rank < world:
        raise TrainsimError(f"rank {rank} is outside a world of {world} processes (RANK/WORLD_SIZE)")
    if local_world < 1 or not 0 <= local_rank < local_world or world % local_world:
        raise TrainsimError(
            f"local rank {local_rank} of {local_world} per node does not fit a world of {world}; "
            "every node must run the same number of ranks (LOCAL_RANK/LOCAL_WORLD_SIZE)"
        )


def launch_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's rank as its launcher set it (0 for a plain ``python -m``)."""
    layout = launch_env(env)
    return 0 if layout is None else layout["rank"]
