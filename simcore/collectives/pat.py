"""PAT (Parallel Aggregated Trees, NCCL >= 2.23): all_gather and reduce_scatter at one GPU per node.

NCCL runs PAT only when every node holds one rank of the communicator (ncclPatEnable); it replaces
the ring's p-1 sequential steps by logarithmic ones. Data pattern (recursive doubling, as Bruck's
all-gather): in round k every rank exchanges min(2^k, p - 2^k) shards of S/p with the rank 2^k
away, so each rank still sends (p-1)/p * S in total, over log2(p) peers instead of one. The rounds
are pipelined, so they run as one phase; every exchange crosses nodes and is striped over the
rank's own NICs. Latency (NCCL's model): base + log2(nodes) * network hop / 3.5 + 2.8 us per rank.
"""

from __future__ import annotations

import math

from simcore.collectives.plan import (
    AlgorithmUnavailable,
    Move,
    Phase,
    PlanContext,
    empty_phase,
    hops_for,
    merged_transfers,
)
from simcore.collectives.striping import host_nics, striped_moves
from simcore.collectives.tuning import latency_param

__all__ = ["all_gather", "pat_counts", "reduce_scatter"]


def pat_counts(ranks: int, nodes: int) -> tuple[float, float]:
    """(node-crossing hop latencies, fixed term in s) of NCCL's PAT latency."""
    inter = math.floor(math.log2(max(1, nodes))) / float(latency_param("pat_net_divisor"))
    return inter, ranks * float(latency_param("pat_per_rank_us")) * 1e-6


def _pat(ctx: PlanContext, label: str, size_bytes: float, towards: int) -> tuple[Phase, ...]:
    blocks = ctx.hosts_in_order(ctx.group)
    if any(len(b) > 1 for b in blocks):
        raise AlgorithmUnavailable(
            f"pat needs one rank per node; this group has up to {max(map(len, blocks))}"
        )
    p = len(ctx.group)
    if p <= 1:
        return (empty_phase(label, "pat"),)
    devices = [ctx.device(r) for r in ctx.group]
    nics = host_nics(ctx, [[d] for d in devices])
    shard = size_bytes / p
    moves: list[Move] = []
    distance = 1
    while distance < p:
        count = min(distance, p - distance)
        for i in range(p):
            j = (i + towards * distance) % p
            moves.extend(striped_moves(devices[i], devices[j], count * shard, nics[i], nics[j]))
        distance *= 2
    transfers = merged_transfers(ctx, moves)
    inter, extra = pat_counts(p, len(blocks))
    return (
        Phase(label, transfers, hops_for(ctx, "pat", transfers, 0, inter, extra), math.ceil(math.log2(p))),
    )


def all_gather(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _pat(ctx, "pat all_gather", size_bytes, 1)


def reduce_scatter(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _pat(ctx, "pat reduce_scatter", size_bytes, -1)
