"""The cluster spec as data: node types (devices and links inside a server), nodes, and the fabric.

Only types: :mod:`topologies.spec` reads them from YAML, :mod:`topologies.nvsmi_graph` builds them
from an ``nvidia-smi topo -m`` capture, :mod:`topologies.builders` turns them into a topology.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ClusterSpec", "DeviceDecl", "FabricSpec", "LinkDecl", "NodeType"]


@dataclass(frozen=True, slots=True)
class DeviceDecl:
    """One device inside a server, by its local name (``gpu3``, ``nvswitch``, ``nic0``)."""

    local: str
    kind: str
    spec: str = ""  # device spec name (GPUs, CPU ranks)
    port_Bps: float = 0.0  # NICs: network port speed, per direction
    in_network_reduction: str = ""  # switches: "nvls" or "sharp"
    vendor: str = ""  # CPUs: "intel", "amd", "arm" (NCCL's network overheads differ by vendor)


@dataclass(frozen=True, slots=True)
class LinkDecl:
    """One full-duplex link inside a server; ``bandwidth_Bps`` is per direction."""

    a: str
    b: str
    link_class: str
    kind: str
    bandwidth_Bps: float
    latency_s: float
    efficiency: float | None = None  # measured fraction of the rate; None: the links.yaml default


@dataclass(frozen=True, slots=True)
class NodeType:
    """A server model: its devices, internal links and which devices run ranks."""

    name: str
    devices: tuple[DeviceDecl, ...]
    links: tuple[LinkDecl, ...]
    ranks: tuple[str, ...]
    source: str = ""
    p2p: bool = True  # GPUs reach each other peer-to-peer (else NCCL stages through host memory)

    @property
    def nics(self) -> tuple[DeviceDecl, ...]:
        return tuple(d for d in self.devices if d.kind == "nic")


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """How servers are joined: switch layout, physical link kind, latencies, oversubscription."""

    type: str = "leaf-spine"
    link_kind: str = "ib"
    nic_latency_s: float = 1e-6
    switch_latency_s: float = 3e-7
    oversubscription: float = 1.0
    nics_per_leaf: int = 32
    in_network_reduction: str = ""
    source: str = ""
    collnet: bool = False  # NCCL CollNet (SHARP) enabled on this fabric
    efficiency: float | None = None  # measured fraction of the NIC rate; None: the links.yaml default
    # NCCL environment the fabric's network plugin sets (e.g. aws-ofi-nccl on EFA), as (name, value)
    nccl_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Node types, how many servers of each (in host order), and the fabric joining them."""

    name: str
    node_types: Mapping[str, NodeType]
    nodes: tuple[tuple[str, int], ...]
    fabric: FabricSpec
    description: str = ""
