"""In-network reduction: NVLS (NVLink SHARP in H100/H200 NVSwitches), NVLS-tree, and CollNet (SHARP).

NVLS (NCCL >= 2.17), for a group on one node whose NVSwitch has ``in_network_reduction="nvls"``:
a reduce-scatter by multimem loads (the switch reads every GPU's buffer, reduces, and returns
shard i to GPU i) then an all-gather by multicast stores (GPU i writes its reduced shard once; the
switch copies it to every GPU), pipelined. Per GPU link: all_reduce S + S/p up and S + S/p down;
all_gather S/p up and S down; reduce_scatter S up and S/p down. The switch-side transfers run at
NCCL's NVLS efficiency (0.85 on Hopper, one of the 16 NVLS channels spent on synchronisation:
x 15/16; simcore/data/nccl.yaml): 8 GPUs then reach ~460 GB/s bus bandwidth (measured ~480,
NVIDIA/nccl-tests#212), and at 4 GPUs or fewer NVLS cannot beat the ring, as measured
(NVIDIA/nccl#1455). Latency: NCCL's NVLS hop (25 us), one per collective.

NVLS-tree (NCCL >= 2.18), across nodes that each have NVLS: inside every node NVLS reduces into
per-GPU shards (GPU j heads shard j); the heads of shard j on all nodes all-reduce it over a double
binary tree through GPU j's own NICs; NVLS multicasts the result. Pipelined as one phase.

CollNet Direct (NCCL's SHARP path, only with ``NCCL_COLLNET_ENABLE=1`` or a spec that enables it),
for a group over several nodes whose fabric switches have ``in_network_reduction="sharp"``: the
nodes reduce-scatter inside (shard j to local rank j), rail j's ranks send shard j up an
aggregation tree - the union of their routes to a common SHARP switch - where every tree link
carries the shard once up and once down, and the nodes all-gather; pipelined as one phase.
"""

from __future__ import annotations

from dataclasses import replace

from simcore.collectives.hierarchical import intra_node_phase, node_blocks
from simcore.collectives.plan import (
    AlgorithmUnavailable,
    Edge,
    Move,
    Phase,
    PlanContext,
    Transfer,
    edge_table,
    empty_phase,
    hops_for,
    merged_transfers,
    route_latency,
)
from simcore.collectives.striping import nic_owners, striped_moves
from simcore.collectives.tree import _tree_edges, dtree_depth
from simcore.collectives.tuning import arch_of, arch_param, latency_param

__all__ = [
    "collnet_direct_all_reduce",
    "nvls_all_gather",
    "nvls_all_reduce",
    "nvls_efficiency",
    "nvls_reduce_scatter",
    "nvls_tree_all_reduce",
]


def nvls_efficiency(ctx: PlanContext) -> float:
    """Fraction of the NVLink rate NVLS traffic reaches on this group's GPUs."""
    arch = arch_of(str(ctx.topology.graph.nodes[ctx.device(ctx.group[0])].get("gpu", "")))
    eff = float(arch_param(arch, "nvls_efficiency", 0.0))
    if eff <= 0:
        raise AlgorithmUnavailable(f"nvls needs Hopper or later GPUs; this group's are {arch}")
    channels = int(arch_param(arch, "nvls_channels", 16))
    return eff * (channels - 1) / channels


def _switches(ctx: PlanContext, host: int) -> list[str]:
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


def _nvls_transfers(ctx: PlanContext, devices: list[str], up: float, down: float) -> list[Transfer]:
    """Each device's traffic to and from its host's NVLS switches (spread evenly), at NVLS efficiency."""
    factor = 1.0 / nvls_efficiency(ctx)
    switches = _switches(ctx, ctx.host(devices[0]))
    m = len(switches)
    transfers: list[Transfer] = []
    for device in devices:
        for switch in switches:
            transfers.append(ctx.transfer(device, switch, up * factor / m))
            transfers.append(ctx.transfer(switch, device, down * factor / m))
    return transfers


def _nvls(ctx: PlanContext, label: str, up_bytes: float, down_bytes: float) -> tuple[Phase, ...]:
    hosts = {ctx.host(ctx.device(r)) for r in ctx.group}
    if len(hosts) != 1:
        raise AlgorithmUnavailable("nvls needs all ranks on one host (across nodes NCCL runs nvls_tree)")
    if len(ctx.group) <= 1:
        return (empty_phase(label, "nvls"),)
    transfers = _nvls_transfers(ctx, [ctx.device(r) for r in ctx.group], up_bytes, down_bytes)
    return (Phase(label, tuple(transfers), hops_for(ctx, "nvls", transfers, 1, 0), 2),)


def nvls_all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    per_link = size_bytes * (1 + 1 / len(ctx.group))
    return _nvls(ctx, "nvls all_reduce", per_link, per_link)


def nvls_all_gather(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _nvls(ctx, "nvls all_gather", size_bytes / len(ctx.group), size_bytes)


def nvls_reduce_scatter(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    return _nvls(ctx, "nvls reduce_scatter", size_bytes, size_bytes / len(ctx.group))


def nvls_tree_all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    """NVLS inside every node, a double binary tree per shard across nodes through its head's NICs."""
    blocks = node_blocks(ctx, "nvls_tree all_reduce")
    g = len(blocks[0])
    hosts = [[ctx.device(r) for r in b] for b in blocks]
    per_link = size_bytes * (1 + 1 / g)
    transfers: list[Transfer] = []
    for devices in hosts:
        transfers += _nvls_transfers(ctx, devices, per_link, per_link)
    moves: list[Move] = []
    half_shard = size_bytes / g / 2
    for j in range(g):
        heads = [[h[j]] for h in hosts]
        own = [_own_nics(ctx, h[j]) for h in hosts]
        nics_of = {h[0]: n for h, n in zip(heads, own, strict=True)}
        for tree in (0, 1):
            for child, parent, _ in _tree_edges(heads, tree):
                for src, dst in ((child, parent), (parent, child)):
                    moves.extend(striped_moves(src, dst, half_shard, nics_of[src], nics_of[dst]))
    network = merged_transfers(ctx, moves)
    transfers += network
    nodes = len(hosts)
    hops = hops_for(ctx, "nvls_tree", transfers, 1, 2 * dtree_depth(nodes))
    return (Phase("nvls_tree all_reduce", tuple(transfers), hops, 2 + 2 * dtree_depth(nodes)),)


def _own_nics(ctx: PlanContext, device: str) -> list[tuple[str, str]]:
    """The NICs NCCL gives ``device`` (its nearest; shared ones dealt out), as (gateway, NIC)."""
    nics, owned, nearest = nic_owners(ctx, ctx.host(device))
    mine = owned.get(device) or [n for n in nics if device in nearest[n]]
    return [(device, nic) for nic in mine]


def _sharp_root(ctx: PlanContext, members: list[str]) -> str:
    """The first SHARP switch on the first member's route that every member's route reaches."""
    nodes = ctx.topology.graph.nodes
    routes = [ctx.route(members[0], m) for m in members[1:]]
    for _, v in routes[0]:
        if nodes[v].get("in_network_reduction") == "sharp" and all(any(e[1] == v for e in r) for r in routes):
            return v
    raise AlgorithmUnavailable(
        f"collnet needs a SHARP switch (in_network_reduction='sharp') that all nodes reach; "
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


def _sharp_rail(ctx: PlanContext, members: list[str], shard: float) -> tuple[list[Transfer], float]:
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
    return transfers, depth


def collnet_direct_all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    if not ctx.topology.in_network_reduction("sharp"):
        raise AlgorithmUnavailable(
            f"collnet needs switches with in_network_reduction='sharp'; topology {ctx.topology.name!r} has none"
        )
    blocks = node_blocks(ctx, "collnet all_reduce")
    g = len(blocks[0])
    rails: list[Transfer] = []
    depth = 0.0
    for j in range(g):
        members = [ctx.device(b[j]) for b in blocks]
        transfers, rail_depth = _sharp_rail(
            replace(ctx, group=tuple(b[j] for b in blocks)), members, size_bytes / g
        )
        rails += transfers
        depth = max(depth, rail_depth)
    inner = [
        intra_node_phase(ctx, "intra-node reduce_scatter", blocks, size_bytes),
        intra_node_phase(ctx, "intra-node all_gather", blocks, size_bytes),
    ]
    merged = (*(t for p in inner for t in p.transfers), *rails)
    arity = float(latency_param("collnet_arity_us")) * 1e-6
    hops = hops_for(ctx, "collnet_direct", merged, 2 * min(1, g - 1), 1, 2 * (g - 1) * arity)
    hops = replace(hops, fabric_s=max(hops.fabric_s, depth))
    return (Phase("collnet_direct all_reduce", merged, hops, 2),)
