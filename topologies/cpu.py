"""CPU-only clusters: ranks are CPU processes (gloo), as calibration runs them on ordinary machines.

Each host has ``ranks_per_host`` processes (kind ``cpu``, device spec ``cpu``: a placeholder that a
calibration profile replaces) joined through a ``loopback`` hub, the kernel's loopback/shared-memory
path; hosts are joined by an Ethernet leaf-spine through one NIC each. The same cluster can be
written as a YAML spec (``topologies/examples/cpu-loopback.yaml``); this builds it for any size.
"""

from __future__ import annotations

from types import MappingProxyType

from simcore.topology import Topology
from topologies.builders import build_cluster
from topologies.spec_types import ClusterSpec, DeviceDecl, FabricSpec, LinkDecl, NodeType
from topologies.yamlcheck import SpecError

__all__ = ["cpu_cluster"]

# engineering estimates, replaced by calibration: gloo over loopback moves a few GB/s per process
# with ~10 us of software latency per message.
DEFAULT_LOOPBACK_BPS = 3e9
DEFAULT_LOOPBACK_LATENCY_S = 10e-6


def cpu_cluster(
    ranks_per_host: int,
    *,
    hosts: int = 1,
    loopback_Bps: float = DEFAULT_LOOPBACK_BPS,
    loopback_latency_s: float = DEFAULT_LOOPBACK_LATENCY_S,
    nic_Bps: float = 1.25e9,
    nic_latency_s: float = 50e-6,
    name: str = "",
) -> Topology:
    """``hosts`` machines with ``ranks_per_host`` CPU ranks each; ``nic_latency_s`` is host to host, one way."""
    if ranks_per_host < 1 or hosts < 1:
        raise SpecError(f"cpu_cluster: ranks_per_host={ranks_per_host} and hosts={hosts} must both be >= 1")
    procs = tuple(DeviceDecl(f"proc{i}", "cpu", spec="cpu") for i in range(ranks_per_host))
    devices = (*procs, DeviceDecl("lo", "switch"), DeviceDecl("nic0", "nic", port_Bps=nic_Bps))
    ends = [p.local for p in procs] + ["nic0"]
    links = tuple(
        LinkDecl(end, "lo", "loopback", "loopback", loopback_Bps, loopback_latency_s) for end in ends
    )
    node_type = NodeType("cpu-host", devices, links, tuple(p.local for p in procs), "placeholder figures")
    fabric = FabricSpec(
        type="leaf-spine",
        link_kind="ethernet",
        nic_latency_s=nic_latency_s / 2,
        switch_latency_s=0.0,
        source="parameters of cpu_cluster",
    )
    label = name or f"cpu-{hosts}x{ranks_per_host}"
    spec = ClusterSpec(label, MappingProxyType({"cpu-host": node_type}), (("cpu-host", hosts),), fabric)
    return build_cluster(spec)
