"""Spreading a node-to-node hop over the node's NICs (rails), as NCCL's channels do.

NCCL runs a collective on several channels; across nodes each channel uses its own NIC, in and
out, and moves data between a GPU and a NIC through the GPU next to that NIC (PXN;
src/graph/search.cc, src/transport/net.cc). We model the channels' inter-node traffic as
*stripes*: the hop from rank x on node A to rank y on node B is split evenly over NIC pairs
(A's c-th NIC, B's c-th NIC), stripe c routed x -> gateway GPU of NIC_A[c] -> NIC_A[c] ->
NIC_B[c] -> gateway GPU of NIC_B[c] -> y, so it stays on rail c and each GPU's PCIe link carries
only its own NICs' stripes. Inside a node the channels' hops add up on the same links, so one
flow per intra-node hop carries them together.

Which NICs a group uses on a host: NCCL gives each GPU its local NICs (those at the smallest PCIe
distance; where several GPUs tie for several NICs, they are dealt out in turn, as
ncclTopoGetLocalNet does), and a communicator uses the NICs of its members. A group whose members
own no NIC (one GPU per node on a server with a single shared NIC) uses the NICs nearest to them.
Nodes of the same type with the same local ranks reuse the first one's answer, renamed, so
planning stays linear in the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.collectives.plan import Move, PlanContext, route_latency

__all__ = ["Gateway", "host_nics", "nic_owners", "striped_moves"]

Gateway = tuple[str, str]  # (device next to the NIC, NIC)

_Owners = tuple[list[str], dict[str, list[str]], dict[str, list[str]]]


def _local(name: str) -> tuple[str, str]:
    prefix, _, local = name.partition("/")
    return prefix, local


def nic_owners(ctx: PlanContext, host: int) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """A host's NICs (in declaration order), each GPU's own NICs, and each NIC's nearest GPUs."""
    # per topology: host -> (NICs in order, GPU -> NICs it owns, NIC -> nearest GPUs)
    known: dict[int, _Owners] = ctx.topology.derived("nic_owners", dict)
    found = known.get(host)
    if found is not None:
        return found
    nodes = ctx.topology.graph.nodes
    on_host = [n for n, a in nodes(data=True) if a.get("host") == host]
    nics = [n for n in on_host if nodes[n].get("kind") == "nic"]
    ranks = set(ctx.topology.ranks)
    gpus = [n for n in on_host if n in ranks]
    nearest: dict[str, list[str]] = {}
    for nic in nics:
        distance = {g: route_latency(ctx.topology, ctx.route(g, nic)) for g in gpus}
        best = min(distance.values(), default=0.0)
        nearest[nic] = [g for g in gpus if distance[g] <= best * (1 + 1e-9) + 1e-15]
    owned: dict[str, list[str]] = {g: [] for g in gpus}
    tied: dict[tuple[str, ...], list[str]] = {}
    for nic in nics:
        tied.setdefault(tuple(nearest[nic]), []).append(nic)
    for owners, group in tied.items():
        for m, nic in enumerate(group):
            if owners:
                owned[owners[m % len(owners)]].append(nic)
    found = known[host] = (nics, owned, nearest)
    return found


def _gateways(ctx: PlanContext, devices: list[str]) -> list[Gateway]:
    """The (gateway, NIC) pairs the group's ``devices`` on one host use, in NIC order."""
    nics, owned, nearest = nic_owners(ctx, ctx.host(devices[0]))
    members = set(devices)
    mine = {nic: d for d in devices for nic in owned.get(d, [])}
    if not mine:  # the members own no NIC: use the ones nearest to them
        mine = {
            nic: next(d for d in devices if d in nearest[nic]) for nic in nics if members & set(nearest[nic])
        }
    return [(mine[nic], nic) for nic in nics if nic in mine]


def host_nics(ctx: PlanContext, hosts: list[list[str]]) -> list[list[Gateway]]:
    """Per host (its group devices), the (gateway device, NIC) pairs it reaches other hosts by."""
    nodes = ctx.topology.graph.nodes
    known: dict[tuple[str, tuple[str, ...]], list[tuple[str, str]]] = {}
    result = []
    for devices in hosts:
        prefix = _local(devices[0])[0]
        locals_ = [_local(d) for d in devices]
        key = (str(nodes[devices[0]].get("host_type", "")), tuple(local for _, local in locals_))
        template = known.get(key)
        if template is not None and all(p == prefix for p, _ in locals_):
            renamed = [(f"{prefix}/{gw}", f"{prefix}/{nic}") for gw, nic in template]
            if all(gw in nodes and nic in nodes for gw, nic in renamed):
                result.append(renamed)
                continue
        gateways = _gateways(ctx, devices)
        if key[0] and all(_local(n)[0] == prefix for g in gateways for n in g):
            known.setdefault(key, [(_local(gw)[1], _local(nic)[1]) for gw, nic in gateways])
        result.append(gateways)
    return result


def striped_moves(
    src: str, dst: str, size_bytes: float, src_nics: Sequence[Gateway], dst_nics: Sequence[Gateway]
) -> list[Move]:
    """The hop ``src -> dst`` between two nodes, split evenly over their paired NICs."""
    stripes = min(len(src_nics), len(dst_nics))
    if stripes == 0:
        return [(src, dst, (), size_bytes)]
    share = size_bytes / stripes
    return [(src, dst, (*src_nics[c], *dst_nics[c][::-1]), share) for c in range(stripes)]
