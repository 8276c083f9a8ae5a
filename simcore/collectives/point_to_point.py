"""Point-to-point patterns: send/recv, and pipelined-chain broadcast and reduce.

send_recv follows nccl-tests' sendrecv_perf: every rank sends S bytes to the next rank of the
group and receives S from the previous one (for a group of two: one exchange each way). One step.

broadcast / reduce are NCCL's pipelined ring chains: the ring is cut at the root; data flows
root -> ... -> last (broadcast) or last -> ... -> root (reduce), every hop carrying S, pipelined
in chunks: time = (p-1) * alpha + S / B.
"""

from __future__ import annotations

from simcore.collectives.plan import Phase, PlanContext, step_alpha

__all__ = ["broadcast", "reduce", "send_recv"]


def send_recv(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    devices = [ctx.device(r) for r in ctx.group]
    p = len(devices)
    pairs = [(devices[i], devices[(i + 1) % p]) for i in range(p)]
    transfers = tuple(ctx.transfer(a, b, size_bytes) for a, b in pairs if a != b)
    if not transfers:
        return (Phase("send_recv", (), 0.0, 1),)
    return (Phase("send_recv", transfers, step_alpha(transfers), 1),)


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
        return (Phase(label, (), 0.0, 1),)
    steps = len(hops)
    return (Phase(label, transfers, steps * step_alpha(transfers), steps),)


def broadcast(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _chain_phase(ctx, "ring broadcast", size_bytes, towards_root=False)


def reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _chain_phase(ctx, "ring reduce", size_bytes, towards_root=True)
