"""In-network reduction: NVLS (NVLink SHARP in H100/H200 NVSwitches) and SHARP (InfiniBand switches).

NVLS (NCCL >= 2.17, NCCL_ALGO=NVLS), for a group on one node whose NVSwitch has
``in_network_reduction="nvls"``: a reduce-scatter by multimem loads (the switch reads every GPU's
buffer, reduces, and returns shard i to GPU i) then an all-gather by multicast stores (GPU i
writes its reduced shard once; the switch copies it to every GPU), pipelined. Per GPU link:
all_reduce S + S/p up and S + S/p down; all_gather S/p up and S down; reduce_scatter S up and
S/p down. Two alpha steps (up, down).
With several NVLS switch nodes in a host, the data is spread evenly over them.

SHARP (NCCL's CollNet), for a group over several nodes whose fabric switches have
``in_network_reduction="sharp"``: as in the hierarchical algorithm the nodes first
reduce-scatter inside (shard j goes to local rank j) and all-gather at the end; in between,
rail j's ranks send shard j up an aggregation tree - the union of their routes to a common SHARP
switch - where every tree link carries the shard once up and once down (switches reduce on the
way up and replicate on the way down). Latency: two alphas of the deepest route.
"""

from __future__ import annotations

from dataclasses import replace

from simcore.collectives.hierarchical import intra_node_phase, node_blocks
from simcore.collectives.plan import (
    STEP_OVERHEAD_S,
    AlgorithmUnavailable,
    Edge,
    Phase,
    PlanContext,
    Transfer,
    concurrent,
    edge_table,
    route_latency,
    step_alpha,
)

__all__ = ["nvls_all_gather", "nvls_all_reduce", "nvls_reduce_scatter", "sharp_all_reduce"]


def _nvls_switches(ctx: PlanContext) -> list[str]:
    hosts = {ctx.topology.host_of_rank(r) for r in ctx.group}
    if len(hosts) != 1:
        raise AlgorithmUnavailable("nvls needs all ranks on one host (multi-node NVLS is not modelled)")
    host = hosts.pop()
    switches = sorted(
        n
        for n, a in ctx.topology.graph.nodes(data=True)
        if a.get("in_network_reduction") == "nvls" and a.get("host") == host
    )
    if not switches:
        raise AlgorithmUnavailable(
            f"nvls needs an NVSwitch with in_network_reduction='nvls' on host {host}; "
            f"topology {ctx.topology.name!r} has none"
        )
    return switches


def _nvls(ctx: PlanContext, label: str, up_bytes: float, down_bytes: float) -> tuple[Phase, ...]:
    switches = _nvls_switches(ctx)
    if len(ctx.group) <= 1:
        return (Phase(label, (), 0.0, 1),)
    m = len(switches)
    transfers: list[Transfer] = []
    for device in (ctx.device(r) for r in ctx.group):
        for switch in switches:
            transfers.append(ctx.transfer(device, switch, up_bytes / m))
            transfers.append(ctx.transfer(switch, device, down_bytes / m))
    return (Phase(label, tuple(transfers), 2 * step_alpha(transfers), 2),)


def nvls_all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    per_link = size_bytes * (1 + 1 / len(ctx.group))
    return _nvls(ctx, "nvls all_reduce", per_link, per_link)


def nvls_all_gather(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _nvls(ctx, "nvls all_gather", size_bytes / len(ctx.group), size_bytes)


def nvls_reduce_scatter(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _nvls(ctx, "nvls reduce_scatter", size_bytes, size_bytes / len(ctx.group))


def _sharp_root(ctx: PlanContext, members: list[str]) -> str:
    """The first SHARP switch on the first member's route that every member's route reaches."""
    nodes = ctx.topology.graph.nodes
    routes = [ctx.route(members[0], m) for m in members[1:]]
    for _, v in routes[0]:
        if nodes[v].get("in_network_reduction") == "sharp" and all(any(e[1] == v for e in r) for r in routes):
            return v
    raise AlgorithmUnavailable(
        f"sharp needs a SHARP switch (in_network_reduction='sharp') that all nodes reach; "
        f"none is common to the routes from {members[0]!r}"
    )


def _route_to(ctx: PlanContext, member: str, first: str, root: str) -> tuple[Edge, ...]:
    """``member``'s route up to ``root``: the prefix of its route to ``first`` when that passes
    the root (device-to-device routes are the router's fast path), else routed directly."""
    route = ctx.route(member, first) if member != first else ()
    for i, (_, v) in enumerate(route):
        if v == root:
            return route[: i + 1]
    return ctx.route(member, root)


def _sharp_rail(ctx: PlanContext, members: list[str], shard: float) -> Phase:
    root = _sharp_root(ctx, members)
    table = edge_table(ctx.topology)
    tree: dict[Edge, None] = {}
    depth = 0.0
    for m in members:
        route = _route_to(ctx, m, members[0], root)
        depth = max(depth, route_latency(ctx.topology, route))
        tree.update(dict.fromkeys(route))
    transfers: list[Transfer] = []
    for u, v in tree:
        transfers.append(Transfer(u, v, shard, ((u, v),), table[u, v][1]))
        transfers.append(Transfer(v, u, shard, ((v, u),), table[v, u][1]))
    return Phase("sharp all_reduce", tuple(transfers), 2 * (depth + STEP_OVERHEAD_S), 2)


def sharp_all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    if not ctx.topology.in_network_reduction("sharp"):
        raise AlgorithmUnavailable(
            f"sharp needs switches with in_network_reduction='sharp'; topology {ctx.topology.name!r} has none"
        )
    blocks = node_blocks(ctx, "sharp all_reduce")
    g = len(blocks[0])
    rails = [
        _sharp_rail(
            replace(ctx, group=tuple(b[j] for b in blocks)),
            [ctx.device(b[j]) for b in blocks],
            size_bytes / g,
        )
        for j in range(g)
    ]
    phases = (
        intra_node_phase(ctx, "intra-node reduce_scatter", blocks, size_bytes),
        concurrent("sharp all_reduce", rails),
        intra_node_phase(ctx, "intra-node all_gather", blocks, size_bytes),
    )
    return tuple(p for p in phases if p.transfers)
