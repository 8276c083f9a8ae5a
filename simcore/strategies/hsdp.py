"""HSDP: FSDP inside each node, replication across nodes (FSDP2 with a 2-D device mesh).

Parameters, gradients and optimizer state are sharded over the GPUs of one node (all-gathers and
reduce-scatters stay on the intra-node fabric); every node holds a full sharded copy, and after
each unit's reduce-scatter the shard is all-reduced among the ranks with the same local index on
every node (one GPU per node). Memory is FSDP's with N = GPUs per node. On one node it is FSDP.
"""

from __future__ import annotations

from simcore.errors import TrainsimError
from simcore.strategies.base import StepContext
from simcore.strategies.fsdp import build_sharded_plan
from simcore.strategies.schedule import StepPlan
from simcore.strategies.wrap import wrap_units

__all__ = ["HSDPStrategy"]


class HSDPStrategy:
    """Shard within a node, replicate across nodes."""

    name = "hsdp"
    description = "HSDP: sharded within a node, replicated across nodes (all-reduce of shards)"

    def build_plan(self, ctx: StepContext) -> StepPlan:
        if ctx.gpus % len(ctx.node):
            raise TrainsimError(
                f"hsdp needs whole nodes: {ctx.gpus} GPUs do not fill nodes of {len(ctx.node)}; "
                f"use a multiple of {len(ctx.node)} GPUs or leave hsdp out of --strategies"
            )
        units = wrap_units(ctx.workload, ctx.config.wrap)
        return build_sharded_plan(ctx, self.name, units, shard_group=ctx.node, replicate_group=ctx.cross_node)
