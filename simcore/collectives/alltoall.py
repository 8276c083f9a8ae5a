"""All-to-all and all-to-all-v (expert and context parallelism): every rank sends to every rank.

NCCL runs them as grouped send/recv to every peer at once (nccl-tests alltoall_perf: each rank's
S-byte buffer is cut into p blocks, block j going to rank j; busbw = algbw * (p-1)/p). all_to_allv
sends ``splits[i][j]`` bytes from rank i to rank j (scaled so that a rank sends S on average).

Layout, linear in the ranks: inside a node, one flow per ordered pair of ranks (NVLink or PCIe
peer-to-peer, or staged through host memory where peers cannot reach each other). Across nodes,
the *hose* model: each rank's traffic to other nodes leaves through its own NICs (striped) to the
first fabric switch, and each rank's traffic from other nodes arrives the same way; on a leaf-spine
fabric the part that crosses leaves also runs leaf -> spine -> leaf. On a non-blocking fabric this
loads every NIC, PCIe and leaf link exactly as the p(p-1) pairwise flows would. One hop of latency.
"""

from __future__ import annotations

from collections import defaultdict

from simcore.collectives.plan import Phase, PlanContext, Transfer
from simcore.collectives.point_to_point import one_hop_phase
from simcore.collectives.striping import nic_owners

__all__ = ["all_to_all", "all_to_allv", "uniform_splits"]


def uniform_splits(ranks: int, size_bytes: float) -> tuple[tuple[float, ...], ...]:
    """nccl-tests' all-to-all: rank i sends S/p to every rank j (its own block stays local)."""
    block = size_bytes / ranks
    return tuple(tuple(0.0 if i == j else block for j in range(ranks)) for i in range(ranks))


def _rank_nics(ctx: PlanContext, device: str) -> list[str]:
    """The NICs ``device`` sends through: its own, else the ones nearest to it."""
    nics, owned, nearest = nic_owners(ctx, ctx.host(device))
    return owned.get(device) or [n for n in nics if device in nearest[n]] or nics


def _first_switch(ctx: PlanContext, nic: str) -> str:
    nodes = ctx.topology.graph._node
    switches = sorted(v for v in ctx.topology.graph._succ[nic] if nodes[v].get("host", -1) == -1)
    if not switches:
        return ""
    return switches[0]


def _layout(ctx: PlanContext, label: str, splits: tuple[tuple[float, ...], ...]) -> tuple[Phase, ...]:
    devices = [ctx.device(r) for r in ctx.group]
    host = [ctx.host(d) for d in devices]
    transfers: list[Transfer] = []
    out_remote = [0.0] * len(devices)
    in_remote = [0.0] * len(devices)
    for i, row in enumerate(splits):
        for j, size in enumerate(row):
            if i == j or size <= 0:
                continue
            if host[i] == host[j]:
                transfers.append(ctx.transfer(devices[i], devices[j], size))
            else:
                out_remote[i] += size
                in_remote[j] += size
    if any(out_remote):
        transfers += _hose(ctx, devices, host, splits, out_remote, in_remote)
    return (one_hop_phase(ctx, label, transfers),)


def _hose(
    ctx: PlanContext,
    devices: list[str],
    host: list[int],
    splits: tuple[tuple[float, ...], ...],
    out_remote: list[float],
    in_remote: list[float],
) -> list[Transfer]:
    """Each rank's inter-node traffic to and from the first fabric switch, plus leaf-spine crossings."""
    transfers: list[Transfer] = []
    leaf_of: dict[int, str] = {}
    for i, device in enumerate(devices):
        nics = _rank_nics(ctx, device)
        for nic in nics:
            switch = _first_switch(ctx, nic)
            if not switch:
                continue
            leaf_of.setdefault(host[i], switch)
            if out_remote[i] > 0:
                transfers.append(ctx.transfer(device, switch, out_remote[i] / len(nics), via=(nic,)))
            if in_remote[i] > 0:
                transfers.append(ctx.transfer(switch, device, in_remote[i] / len(nics), via=(nic,)))
    if ctx.topology.metadata.get("fabric") != "leaf-spine":
        return transfers  # one switch, or rails: NCCL's PXN keeps every byte on its rail
    up: dict[str, float] = defaultdict(float)
    down: dict[str, float] = defaultdict(float)
    for i, row in enumerate(splits):
        for j, size in enumerate(row):
            a, b = leaf_of.get(host[i]), leaf_of.get(host[j])
            if a and b and a != b:
                up[a] += size
                down[b] += size
    spine = "spine0"
    if spine in ctx.topology.graph:
        transfers += [ctx.transfer(leaf, spine, size) for leaf, size in up.items()]
        transfers += [ctx.transfer(spine, leaf, size) for leaf, size in down.items()]
    return transfers


def all_to_all(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _layout(ctx, "all_to_all", uniform_splits(len(ctx.group), size_bytes))


def all_to_allv(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    splits = ctx.splits or uniform_splits(len(ctx.group), size_bytes)
    return _layout(ctx, "all_to_allv", tuple(tuple(v * size_bytes for v in row) for row in splits))
