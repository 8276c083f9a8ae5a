"""HSDP: FSDP inside each node, replication across nodes (FSDP2 with a 2-D device mesh).

Parameters, gradients and optimizer state are sharded over the GPUs of one node (all-gathers and
reduce-scatters stay on the intra-node fabric); every node holds a full sharded copy, and after
each unit's reduce-scatter the shard is all-reduced among the ranks with the same local index on
every node (one GPU per node). Memory is FSDP's with N = GPUs per node. On one node it is FSDP.

The replicate all-reduces of all local ranks run at the same time (one group per local rank), so
they are priced together where the context can (``StepContext.concurrent``): groups that share NICs
(one NIC per node) slow each other, groups on separate rails do not.
"""

from __future__ import annotations

from dataclasses import replace

from simcore.errors import TrainsimError
from simcore.step.plan import StepPlan
from simcore.strategies.base import CommCost, StepContext
from simcore.strategies.fsdp import build_sharded_plan
from simcore.strategies.wrap import wrap_units

__all__ = ["HSDPStrategy"]


class HSDPStrategy:
    """Shard within a node, replicate across nodes."""

    name = "hsdp"
    description = "HSDP: sharded within a node, replicated across nodes (all-reduce of shards)"
    framework = "torch-fsdp"
    zero_stage = 3
    shard_scope = "node"
    communicates_every_microbatch = True

    def assumption_note(self, ctx: StepContext) -> str:
        return ""

    def layer_groups(self, ctx: StepContext) -> list[int]:
        """The unit of each layer (see fastpath.fold)."""
        return list(wrap_units(ctx.workload, ctx.config.wrap, ctx.caches.unit_plans).unit_of_layer)

    def build_plan(self, ctx: StepContext) -> StepPlan:
        if ctx.gpus % len(ctx.node):
            raise TrainsimError(
                f"hsdp needs whole nodes: {ctx.gpus} GPUs do not fill nodes of {len(ctx.node)}; "
                f"use a multiple of {len(ctx.node)} GPUs or leave hsdp out of --strategies"
            )
        units = wrap_units(ctx.workload, ctx.config.wrap, ctx.caches.unit_plans)
        ctx = _replicas_together(ctx)
        return build_sharded_plan(ctx, self, units, shard_group=ctx.node, replicate_group=ctx.cross_node)


def _replicas_together(ctx: StepContext) -> StepContext:
    """``ctx`` pricing the replicate group's all-reduce as every local rank's group at once."""
    together = ctx.concurrent
    if together is None or len(ctx.cross_node) < 2 or len(ctx.node) < 2:
        return ctx
    # ranks fill hosts in order, so local rank i's group is rank 0's shifted by i
    groups = tuple(tuple(r + i for r in ctx.cross_node) for i in range(len(ctx.node)))
    alone, replicas = ctx.collective, ctx.cross_node

    def collective(op: str, size_bytes: float, group: tuple[int, ...]) -> CommCost:
        if tuple(group) == replicas:
            return together(op, size_bytes, groups)
        return alone(op, size_bytes, group)

    return replace(ctx, collective=collective)
