"""Point-to-point patterns: send/recv, and pipelined-chain broadcast and reduce.

send_recv follows nccl-tests' sendrecv_perf: every rank sends S bytes to the next rank of the
group and receives S from the previous one (for a group of two: one exchange each way). One hop of
latency (network if any pair crosses nodes).

broadcast / reduce are NCCL's pipelined ring chains: the ring is cut at the root; data flows
root -> ... -> last (broadcast) or last -> ... -> root (reduce), every hop carrying S, pipelined
in chunks: time = latency of the p-1 hops (node-crossing ones at network latency) + S / B.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.collectives.plan import Phase, PlanContext, Transfer, empty_phase, hops_for

__all__ = ["broadcast", "one_hop_phase", "reduce", "send_recv"]


def one_hop_phase(ctx: PlanContext, label: str, transfers: Sequence[Transfer]) -> Phase:
    """Transfers that all run at once, with one hop of latency (point-to-point pattern)."""
    if not transfers:
        return empty_phase(label, "p2p")
    crosses = any(ctx.host(t.src) != ctx.host(t.dst) for t in transfers)
    hops = hops_for(ctx, "p2p", transfers, 0 if crosses else 1, 1 if crosses else 0)
    return Phase(label, tuple(transfers), hops, 1)


def send_recv(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    devices = [ctx.device(r) for r in ctx.group]
    p = len(devices)
    pairs = [(devices[i], devices[(i + 1) % p]) for i in range(p)]
    transfers = [ctx.transfer(a, b, size_bytes) for a, b in pairs if a != b]
    return (one_hop_phase(ctx, "send_recv", transfers),)


def _chain(ctx: PlanContext) -> list[str]:
    """The group in ring order starting at the root."""
    i = ctx.group.index(ctx.root)
    return [ctx.device(r) for r in ctx.group[i:] + ctx.group[:i]]


def _chain_phase(ctx: PlanContext, label: str, size_bytes: float, towards_root: bool) -> tuple[Phase, ...]:
    chain = _chain(ctx)
    hops = [
        (chain[i + 1], chain[i]) if towards_root else (chain[i], chain[i + 1]) for i in range(len(chain) - 1)
    ]
    transfers = tuple(ctx.transfer(a, b, size_bytes) for a, b in hops)
    if not transfers:
        return (empty_phase(label, "chain"),)
    inter = sum(ctx.host(a) != ctx.host(b) for a, b in hops)
    latency = hops_for(ctx, "chain", transfers, len(hops) - inter, inter)
    return (Phase(label, transfers, latency, len(hops)),)


def broadcast(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _chain_phase(ctx, "ring broadcast", size_bytes, towards_root=False)


def reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _chain_phase(ctx, "ring reduce", size_bytes, towards_root=True)
