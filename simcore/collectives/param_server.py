"""Parameter-server push and pull: incast on the servers' links (Li et al., OSDI 2014).

The group lists the workers; ``servers`` (ranks) hold one shard each of the S-byte model. Push:
every worker sends S/k to each of the k servers at once, so a server's downlink carries
(workers) * S/k - the incast. Pull: the reverse. A worker that is also a server keeps its own
shard local. One step; latency one hop.
"""

from __future__ import annotations

from simcore.collectives.plan import Phase, PlanContext
from simcore.collectives.point_to_point import one_hop_phase

__all__ = ["ps_pull", "ps_push"]


def _exchange(ctx: PlanContext, label: str, size_bytes: float, to_servers: bool) -> tuple[Phase, ...]:
    servers = [ctx.device(s) for s in ctx.servers]
    shard = size_bytes / len(servers)
    transfers = [
        ctx.transfer(w, s, shard) if to_servers else ctx.transfer(s, w, shard)
        for w in (ctx.device(r) for r in ctx.group)
        for s in servers
        if w != s
    ]
    return (one_hop_phase(ctx, label, transfers),)


def ps_push(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _exchange(ctx, "ps_push", size_bytes, to_servers=True)


def ps_pull(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _exchange(ctx, "ps_pull", size_bytes, to_servers=False)
