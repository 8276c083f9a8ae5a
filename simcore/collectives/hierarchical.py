"""Hierarchical all-reduce: intra-node reduce-scatter, inter-node all-reduce per rail, intra-node all-gather.

With g ranks per node (equal on every node), phase 1 reduce-scatters inside every node (a ring
per node, (g-1)/g * S per hop), so local rank j holds the node's sum of shard j (S/g bytes).
Phase 2 all-reduces shard j among the j-th ranks of all nodes (g concurrent rail rings, each
2(n-1)/n * S/g per hop): every NIC/rail carries 1/g of the data. Phase 3 all-gathers inside
every node. This is the "2D"/hierarchical scheme of Horovod and NCCL's CollNet/NVLS-tree
structure with a ring in the middle. The phases run one after another (three launches, each with
NCCL's ring latency); trainsim's own algorithm, never chosen automatically.
"""

from __future__ import annotations

from dataclasses import replace

from simcore.collectives.plan import AlgorithmUnavailable, Phase, PlanContext, concurrent
from simcore.collectives.ring import ring_phase

__all__ = ["all_reduce", "intra_node_phase", "node_blocks"]


def node_blocks(ctx: PlanContext, what: str) -> list[list[int]]:
    """The group's ranks per host; AlgorithmUnavailable unless >= 2 hosts with equal counts."""
    blocks = ctx.hosts_in_order(ctx.group)
    if len(blocks) < 2:
        raise AlgorithmUnavailable(f"{what} needs ranks on at least two hosts; this group is on one")
    if len({len(b) for b in blocks}) != 1:
        raise AlgorithmUnavailable(
            f"{what} needs the same number of ranks on every host; "
            f"this group has {sorted({len(b) for b in blocks})}"
        )
    return blocks


def intra_node_phase(ctx: PlanContext, label: str, blocks: list[list[int]], size_bytes: float) -> Phase:
    """A reduce-scatter (or all-gather) ring of an S-byte buffer inside every node, concurrently."""
    g = len(blocks[0])
    return concurrent(
        label,
        [ring_phase(replace(ctx, group=tuple(b)), label, (g - 1) / g * size_bytes, g - 1) for b in blocks],
    )


def all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    blocks = node_blocks(ctx, "hierarchical all_reduce")
    g, n = len(blocks[0]), len(blocks)
    shard = size_bytes / g
    rails = [
        ring_phase(
            replace(ctx, group=tuple(b[j] for b in blocks)),
            "inter-node all_reduce",
            2 * (n - 1) / n * shard,
            2 * (n - 1),
            laps=2,
        )
        for j in range(g)
    ]
    phases = (
        intra_node_phase(ctx, "intra-node reduce_scatter", blocks, size_bytes),
        concurrent("inter-node all_reduce", rails),
        intra_node_phase(ctx, "intra-node all_gather", blocks, size_bytes),
    )
    return tuple(p for p in phases if p.transfers)
