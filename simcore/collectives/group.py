"""What NCCL's tuner knows about a group before it prices an algorithm: its shape and hardware.

:func:`group_info` reads it off the topology once per group: ranks, nodes and ranks per node, the
GPU generation (NCCL's tables are indexed by compute capability), the CPU vendor (NCCL's network
overheads and multi-node LL caps differ by vendor), the NICs the group uses per node (channels),
and which algorithms the hardware and the options allow (NVLS needs an NVLS switch, more than two
GPUs on the node and Hopper or later; NVLS-tree the same on every node of a multi-node group;
CollNet a SHARP fabric and ``NCCL_COLLNET_ENABLE``; PAT one GPU per node).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.collectives.options import NcclOptions
from simcore.collectives.plan import PlanContext
from simcore.collectives.striping import host_nics
from simcore.collectives.tuning import arch_of, channels, size_channels

if TYPE_CHECKING:
    from simcore.topology import Topology

__all__ = ["GroupInfo", "group_info"]

_ARCH_ORDER = ("volta", "ampere", "hopper", "blackwell")


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A group's shape and hardware as the cost model uses them."""

    ranks: int
    nodes: int
    ppn: int  # most ranks on one node
    backend: str  # "nccl" (GPU ranks) or "gloo" (CPU ranks)
    arch: str = "ampere"
    vendor: str = "intel"
    nics: int = 0  # NICs the group uses on its most poorly served node
    nvls: bool = False
    nvls_tree: bool = False
    collnet: bool = False
    pat: bool = False
    ll128_net: bool = True  # LL128 may cross the network (Hopper+, or GPU-NIC paths inside a PCIe switch)
    buffsize: int = 0  # NCCL_BUFFSIZE where set (0: NCCL's default)
    nvls_chunk: int = 0  # NCCL_NVLS_CHUNKSIZE where set
    nvls_tree_max_chunk: int = 0  # NCCL_NVLSTREE_MAX_CHUNKSIZE where set
    # The latency NCCL's tuner adds per node-crossing hop where the network plugin reports one
    # (OFI_NCCL_NET_LATENCY); None: the tuner sees the fabric's own latency.
    tuner_net_latency_s: float | None = None

    @property
    def channels(self) -> int:
        return channels(self.nodes, self.nics)

    def channels_for(self, pattern: str, proto: str, size_bytes: float) -> int:
        """The channels NCCL runs ``pattern`` / ``proto`` on for ``size_bytes`` (fewer for small sizes)."""
        return size_channels(self.channels, pattern, proto, self.ranks, size_bytes)

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def _nvls_hosts(topology: Topology) -> frozenset[object]:
    """Hosts with an NVLS switch (a node of theirs reduces in the network by NVLS)."""
    nodes = topology.graph.nodes(data=True)
    return frozenset(a.get("host") for _, a in nodes if a.get("in_network_reduction") == "nvls")


def _host_vendors(topology: Topology) -> dict[object, frozenset[str]]:
    """The vendors named by each host's nodes."""
    found: dict[object, set[str]] = {}
    for _, a in topology.graph.nodes(data=True):
        found.setdefault(a.get("host"), set()).add(str(a.get("vendor", "")))
    return {host: frozenset(vendors) for host, vendors in found.items()}


def _nvls_switch(ctx: PlanContext, host: int) -> bool:
    # read off the graph once per topology: a sweep asks for every group it prices
    return host in ctx.topology.derived("nvls hosts", lambda: _nvls_hosts(ctx.topology))


def group_info(ctx: PlanContext, options: NcclOptions) -> GroupInfo:
    """The shape and hardware of ``ctx.group`` on ``ctx.topology``."""
    topology = ctx.topology
    nodes = topology.graph._node
    blocks = ctx.hosts_in_order(ctx.group)
    devices = [[ctx.device(r) for r in b] for b in blocks]
    ppn = max(len(b) for b in blocks)
    first = nodes[devices[0][0]]
    if first.get("kind") != "gpu":
        return GroupInfo(len(ctx.group), len(blocks), ppn, "gloo")
    arch = min((arch_of(str(nodes[d[0]].get("gpu", ""))) for d in devices), key=_ARCH_ORDER.index)
    hosts = {ctx.host(d[0]) for d in devices}
    by_host = topology.derived("host vendors", lambda: _host_vendors(topology))
    vendors = set().union(*(by_host.get(h, frozenset()) for h in hosts))
    vendor = "amd" if "amd" in vendors else "intel"
    multi = len(blocks) > 1
    gateways = host_nics(ctx, devices) if multi else []
    hopper = _ARCH_ORDER.index(arch) >= _ARCH_ORDER.index("hopper")
    nvls_hosts = hopper and options.nvls and all(_nvls_switch(ctx, ctx.host(d[0])) for d in devices)
    collnet = options.collnet if options.collnet is not None else bool(topology.metadata.get("collnet"))
    return GroupInfo(
        ranks=len(ctx.group),
        nodes=len(blocks),
        ppn=ppn,
        backend="nccl",
        arch=arch,
        vendor=vendor,
        nics=min((len(g) for g in gateways), default=0),
        nvls=nvls_hosts and not multi and ppn > 2,
        nvls_tree=nvls_hosts and multi and min(len(b) for b in blocks) > 2,
        collnet=bool(collnet) and multi and topology.in_network_reduction("sharp"),
        pat=multi and ppn == 1,
        ll128_net=not multi or hopper or _nics_in_switch(ctx, gateways[0] if gateways else []),
        buffsize=options.buffsize or 0,
        nvls_chunk=options.nvls_chunk or 0,
        nvls_tree_max_chunk=options.nvls_tree_max_chunk or 0,
        tuner_net_latency_s=(
            options.plugin_net_latency_us * 1e-6
            if multi and options.plugin_net_latency_us is not None
            else None
        ),
    )


def _nics_in_switch(ctx: PlanContext, gateways: list[tuple[str, str]]) -> bool:
    """Whether every gateway GPU reaches its NIC without crossing a CPU (NCCL's PATH_PXB or better)."""
    nodes = ctx.topology.graph._node
    return bool(gateways) and all(
        all(nodes[v].get("kind") != "cpu" for _, v in ctx.route(gpu, nic)) for gpu, nic in gateways
    )
