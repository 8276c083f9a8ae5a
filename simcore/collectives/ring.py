"""Ring algorithms (Patarasuk & Yuan 2009; NCCL's ring): all_reduce, all_gather, reduce_scatter.

Every rank sends to the next rank of the ring. All-reduce is a reduce-scatter followed by an
all-gather: 2(p-1) steps, each moving one S/p chunk over every hop, so each hop carries
2(p-1)/p * S in total. All-gather and reduce-scatter are p-1 such steps ((p-1)/p * S per hop).

Latency (NCCL's model): a chunk passes every step's hop; of the 2(p-1) steps of an all-reduce over
n nodes, 2(n-1) cross nodes and pay the network's hop latency, the rest the NVLink/PCI hop latency.

Ring order. A caller-given group order is kept as given; the default group is all ranks host by
host (:func:`node_contiguous`), so a multi-node ring enters and leaves each node once, as NCCL's
rings do. NCCL runs such rings on several channels, one NIC each; here the hop between two nodes
is striped over the nodes' NICs (:mod:`simcore.collectives.striping`), which loads every NIC and
rail as the channels do with one flow per intra-node hop and one per stripe.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.collectives.plan import Move, Phase, PlanContext, empty_phase, hops_for, merged_transfers
from simcore.collectives.striping import host_nics, striped_moves

__all__ = [
    "all_gather",
    "all_reduce",
    "node_contiguous",
    "reduce_scatter",
    "ring_counts",
    "ring_moves",
    "ring_phase",
]


def node_contiguous(ctx: PlanContext, ranks: Sequence[int]) -> tuple[int, ...]:
    """``ranks`` regrouped host by host (hosts by first appearance; order inside a host kept)."""
    return tuple(r for host in ctx.hosts_in_order(ranks) for r in host)


def ring_moves(ctx: PlanContext, bytes_per_hop: float) -> list[Move]:
    """The ring's hops in group order; a hop between two nodes is striped over their NICs."""
    devices = [ctx.device(r) for r in ctx.group]
    n = len(devices)
    hosts = [[ctx.device(r) for r in h] for h in ctx.hosts_in_order(ctx.group)]
    if len(hosts) == 1:
        return [(devices[i], devices[(i + 1) % n], (), bytes_per_hop) for i in range(n)]
    nics_of = dict(zip((h[0] for h in hosts), host_nics(ctx, hosts), strict=True))
    head_of = {d: h[0] for h in hosts for d in h}
    moves: list[Move] = []
    for i in range(n):
        src, dst = devices[i], devices[(i + 1) % n]
        if head_of[src] == head_of[dst]:
            moves.append((src, dst, (), bytes_per_hop))
        else:
            moves.extend(striped_moves(src, dst, bytes_per_hop, nics_of[head_of[src]], nics_of[head_of[dst]]))
    return moves


def ring_counts(steps: int, nodes: int, laps: int) -> tuple[float, float]:
    """(intra-node, node-crossing) hop latencies of ``steps`` ring steps over ``nodes`` nodes
    (``laps``: 2 for an all-reduce, 1 otherwise), as NCCL counts them."""
    inter = laps * (nodes - 1) if nodes > 1 else 0
    return float(max(0, steps - inter)), float(inter)


def ring_phase(ctx: PlanContext, label: str, bytes_per_hop: float, steps: int, laps: int = 1) -> Phase:
    """The group's ring, every hop carrying ``bytes_per_hop``, with ``steps`` steps of latency."""
    if len(ctx.group) <= 1 or steps <= 0:
        return empty_phase(label, "ring")
    transfers = merged_transfers(ctx, ring_moves(ctx, bytes_per_hop))
    intra, inter = ring_counts(steps, len(ctx.hosts_in_order(ctx.group)), laps)
    return Phase(label, transfers, hops_for(ctx, "ring", transfers, intra, inter), steps)


def all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    p = len(ctx.group)
    return (ring_phase(ctx, "ring all_reduce", 2 * (p - 1) / p * size_bytes, 2 * (p - 1), laps=2),)


def all_gather(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    p = len(ctx.group)
    return (ring_phase(ctx, "ring all_gather", (p - 1) / p * size_bytes, p - 1),)


def reduce_scatter(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    p = len(ctx.group)
    return (ring_phase(ctx, "ring reduce_scatter", (p - 1) / p * size_bytes, p - 1),)
