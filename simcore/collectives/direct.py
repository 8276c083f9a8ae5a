"""Direct (one-shot) collectives over a switch: every rank exchanges with every other at once.

All-reduce one-shot: each rank sends its whole S-byte buffer to every peer and reduces locally
(one step; each rank's uplink carries (p-1) * S), as the one-shot all-reduce kernels of
TensorRT-LLM and vLLM's custom all-reduce do on NVSwitch. All-gather: each rank sends its S/p
shard to every peer; reduce-scatter: each rank sends shard j to rank j (both (p-1)/p * S per
uplink, in one step). Latency is one hop; p(p-1) flows, so it is limited to small groups.
"""

from __future__ import annotations

from simcore.collectives.plan import AlgorithmUnavailable, Phase, PlanContext
from simcore.collectives.point_to_point import one_hop_phase

__all__ = ["MAX_DIRECT_RANKS", "all_gather", "all_reduce", "reduce_scatter"]

MAX_DIRECT_RANKS = 64


def _all_to_all(ctx: PlanContext, label: str, bytes_per_pair: float) -> tuple[Phase, ...]:
    p = len(ctx.group)
    if p > MAX_DIRECT_RANKS:
        raise AlgorithmUnavailable(
            f"direct needs p(p-1) flows; it is limited to {MAX_DIRECT_RANKS} ranks, this group has {p}"
        )
    devices = [ctx.device(r) for r in ctx.group]
    transfers = [ctx.transfer(a, b, bytes_per_pair) for a in devices for b in devices if a != b]
    return (one_hop_phase(ctx, label, transfers),)


def all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _all_to_all(ctx, "direct all_reduce", size_bytes)


def all_gather(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _all_to_all(ctx, "direct all_gather", size_bytes / len(ctx.group))


def reduce_scatter(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _all_to_all(ctx, "direct reduce_scatter", size_bytes / len(ctx.group))
