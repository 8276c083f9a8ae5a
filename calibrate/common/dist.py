"""The distributed context every calibration job runs in: torchrun, Slurm, or one plain process.

``init_distributed()`` reads what the launcher left in the environment:

- torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``PORT``;
- one srun task per GPU: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID`` and
  ``SLURM_NTASKS_PER_NODE`` stand in for the above when ``RANK`` is absent (the sbatch template
  exports ``MASTER_ADDR``);
- nothing at all: a world of one process, rendezvous through an in-memory store, so every job also
  runs as ``python -m calibrate.<job>``.

The backend is ``nccl`` when CUDA is available and ``gloo`` otherwise, as torch recommends.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from calibrate.common.launch import BACKENDS, launch_env
from simcore.errors import TrainsimError

__all__ = [
    "BACKENDS",
    "DistContext",
    "NodeGroups",
    "all_gather_into_tensor",
    "default_backend",
    "init_distributed",
    "launch_env",
    "new_subgroups_by_node",
    "reduce_scatter_tensor",
    "set_threads",
    "shutdown",
]


@dataclass(frozen=True, slots=True)
class DistContext:
    """Where this process sits in the job: its rank, the world, its node, backend and device."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device

    @property
    def nodes(self) -> int:
        """Number of nodes, assuming every node runs ``local_world_size`` ranks (as launchers do)."""
        return max(1, self.world_size // self.local_world_size)

    @property
    def node_rank(self) -> int:
        return self.rank // self.local_world_size

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that prints tables and writes shared files."""
        return self.rank == 0


@dataclass(frozen=True, slots=True)
class NodeGroups:
    """This rank's process groups inside its node (``intra``) and across nodes (``inter``).

    ``intra_ranks`` are the global ranks on this node; ``inter_ranks`` are the ranks with the same
    local rank on every node (one per node), as hierarchical collectives pair them.
    """

    intra: Any
    inter: Any
    intra_ranks: tuple[int, ...]
    inter_ranks: tuple[int, ...]


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_distributed(backend: str | None = None, *, timeout_s: float = 600.0) -> DistContext:
    """Join the process group the launcher describes (or a world of one) and return where we are."""
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise TrainsimError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    layout = launch_env()
    if layout is None:
        layout = {"rank": 0, "world_size": 1, "local_rank": 0, "local_world_size": 1}
    device = torch.device("cpu")
    if backend == "nccl":  # srun --gpus-per-task=1 shows each task only its own GPU, as cuda:0
        device = torch.device("cuda", layout["local_rank"] % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        timeout = _dt.timedelta(seconds=timeout_s)
        if "RANK" not in os.environ:
            _init_without_torchrun(backend, layout, timeout)
        else:
            dist.init_process_group(backend, timeout=timeout)
    return DistContext(backend=str(dist.get_backend()), device=device, **layout)


def _init_without_torchrun(backend: str, layout: Mapping[str, int], timeout: _dt.timedelta) -> None:
    if layout["world_size"] == 1:
        store: Any = dist.HashStore()  # a world of one needs no rendezvous and no port
    else:  # srun tasks: rendezvous at MASTER_ADDR:MASTER_PORT, rank 0 hosts the store
        if "MASTER_ADDR" not in os.environ:
            raise TrainsimError(
                "MASTER_ADDR is not set; export the first node's hostname (see calibrate/slurm)"
            )
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ.get("MASTER_PORT", "29500")),
            layout["world_size"],
            is_master=layout["rank"] == 0,
            timeout=timeout,
        )
    dist.init_process_group(
        backend, store=store, rank=layout["rank"], world_size=layout["world_size"], timeout=timeout
    )


def set_threads(n: int | None = None) -> int:
    """Set torch's intra-op threads and return the number in force.

    ``None`` shares this process's CPUs evenly among the ranks on the node (torchrun otherwise
    leaves every rank at ``OMP_NUM_THREADS=1``).
    """
    if n is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        local = (launch_env() or {}).get("local_world_size", 1)
        n = max(1, cpus // local)
    if n < 1:
        raise TrainsimError(f"threads must be at least 1, got {n}")
    torch.set_num_threads(n)
    return int(torch.get_num_threads())


def all_gather_into_tensor(
    output: torch.Tensor, input: torch.Tensor, group: Any = None, async_op: bool = False
) -> Any:
    """Gather every rank's ``input`` into ``output`` (concatenated), under the current torch name."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(output, input, group=group, async_op=async_op)


def reduce_scatter_tensor(
    output: torch.Tensor, input: torch.Tensor, group: Any = None, async_op: bool = False
) -> Any:
    """Sum ``input`` over ranks and give each rank its slice in ``output``, under the current name."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(output, input, op=dist.ReduceOp.SUM, group=group, async_op=async_op)


def new_subgroups_by_node(ctx: DistContext) -> NodeGroups:
    """Create the intra-node and inter-node groups (every rank must call this, in the same order)."""
    per_node = ctx.local_world_size
    intra_ranks = tuple(range(ctx.node_rank * per_node, (ctx.node_rank + 1) * per_node))
    inter_ranks = tuple(range(ctx.local_rank, ctx.world_size, per_node))
    intra = inter = None
    for node in range(ctx.nodes):  # dist.new_group is collective: same calls, same order, on every rank
        ranks = list(range(node * per_node, (node + 1) * per_node))
        group = dist.new_group(ranks)
        if node == ctx.node_rank:
            intra = group
    for local in range(per_node):
        group = dist.new_group(list(range(local, ctx.world_size, per_node)))
        if local == ctx.local_rank:
            inter = group
    return NodeGroups(intra=intra, inter=inter, intra_ranks=intra_ranks, inter_ranks=inter_ranks)


def shutdown() -> None:
    """Leave the process group (safe to call twice or without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
