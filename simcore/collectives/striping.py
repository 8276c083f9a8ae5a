"""Spreading a node-to-node hop over all the node's NICs (rails), as NCCL's channels do.

NCCL runs a collective on several channels; across nodes each channel uses its own NIC, in and
out, and moves data between a GPU and a NIC through the GPU next to that NIC (PXN;
src/graph/search.cc, src/transport/net.cc). We model the channels' inter-node traffic as
*stripes*: the hop from rank x on node A to rank y on node B is split evenly over NIC pairs
(A's c-th NIC, B's c-th NIC), stripe c routed x -> gateway GPU of NIC_A[c] -> NIC_A[c] ->
NIC_B[c] -> gateway GPU of NIC_B[c] -> y, so it stays on rail c and each GPU's PCIe link carries
only its own NIC's stripe. Inside a node the channels' hops add up on the same links, so one
flow per intra-node hop carries them together.

A node's NICs (with their gateway GPUs) are found from the routes its group ranks take to another
node, in local-rank order (on a DGX: GPU c leaves through NIC c). Nodes of the same type with the
same local ranks reuse the first one's answer, renamed, so planning stays linear in the nodes.
"""

from __future__ import annotations

from simcore.collectives.plan import Move, PlanContext

__all__ = ["Gateway", "host_nics", "striped_moves"]

Gateway = tuple[str, str]  # (device next to the NIC, NIC)


def _first_nic(ctx: PlanContext, src: str, dst: str) -> str | None:
    nodes = ctx.topology.graph.nodes
    for _, v in ctx.route(src, dst):
        if nodes[v].get("kind") == "nic":
            return v
    return None


def _local(name: str) -> tuple[str, str]:
    prefix, _, local = name.partition("/")
    return prefix, local


def _gateways(ctx: PlanContext, devices: list[str], remote: str) -> list[Gateway]:
    gateways: list[Gateway] = []
    for device in devices:
        nic = _first_nic(ctx, device, remote)
        if nic is not None and nic not in (g[1] for g in gateways):
            gateways.append((device, nic))
    return gateways


def host_nics(ctx: PlanContext, hosts: list[list[str]]) -> list[list[Gateway]]:
    """Per host (its devices), the distinct (gateway device, NIC) pairs it reaches other hosts by."""
    nodes = ctx.topology.graph.nodes
    known: dict[tuple[str, tuple[str, ...]], list[tuple[str, str]]] = {}
    result = []
    for i, devices in enumerate(hosts):
        prefix = _local(devices[0])[0]
        locals_ = [_local(d) for d in devices]
        key = (str(nodes[devices[0]].get("host_type", "")), tuple(local for _, local in locals_))
        template = known.get(key)
        if template is not None and all(p == prefix for p, _ in locals_):
            renamed = [(f"{prefix}/{gw}", f"{prefix}/{nic}") for gw, nic in template]
            if all(gw in nodes and nic in nodes for gw, nic in renamed):
                result.append(renamed)
                continue
        gateways = _gateways(ctx, devices, hosts[(i + 1) % len(hosts)][0])
        if all(_local(n)[0] == prefix for g in gateways for n in g):
            known.setdefault(key, [(_local(gw)[1], _local(nic)[1]) for gw, nic in gateways])
        result.append(gateways)
    return result


def striped_moves(
    src: str, dst: str, size_bytes: float, src_nics: list[Gateway], dst_nics: list[Gateway]
) -> list[Move]:
    """The hop ``src -> dst`` between two nodes, split evenly over their paired NICs."""
    stripes = min(len(src_nics), len(dst_nics))
    if stripes == 0:
        return [(src, dst, (), size_bytes)]
    share = size_bytes / stripes
    return [(src, dst, (*src_nics[c], *dst_nics[c][::-1]), share) for c in range(stripes)]
