"""Network what-ifs on any cluster without editing its YAML: NIC speed, NICs per node, oversubscription.

:class:`NetworkOverrides` is what ``--nic-bandwidth RATE``, ``--nics-per-node N`` and
``--oversubscription R`` ask for; :func:`apply_network` rewrites a parsed :class:`ClusterSpec` with
it before the cluster is built, so every builder, router and collective sees an ordinary spec:

- ``nic_bandwidth_Bps`` sets the port speed of every NIC of every node type (per direction);
- ``nics_per_node`` gives every node type that many NICs, ``nic0`` .. ``nic{N-1}``. NIC ``j`` takes
  the place of the node's original NIC ``j * M // N`` (of its ``M``, in device order): it is linked
  where that NIC was and keeps its port speed unless ``nic_bandwidth_Bps`` says otherwise. Fewer
  NICs than the build has keep every (M / N)-th one, so they stay spread over the PCIe switches
  (hgx-h100 with 4 keeps one per switch); more repeat each attachment point, so two NICs on one
  PCIe switch share that switch's links, as p5.48xlarge's four EFA NICs per GPU do;
- ``oversubscription`` replaces the fabric's leaf downlink : uplink ratio.

A node type without NICs cannot be given some (there is nothing to say where they attach).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from simcore.limits import DEVICES_PER_NODE, LINKS_PER_NODE
from simcore.units import parse_bandwidth
from topologies.spec import parse_oversubscription
from topologies.spec_types import ClusterSpec, DeviceDecl, LinkDecl, NodeType
from topologies.yamlcheck import SpecError, check_bound, physical_quantity

__all__ = ["NetworkOverrides", "apply_network", "network_overrides"]


@dataclass(frozen=True, slots=True)
class NetworkOverrides:
    """Changes to a cluster's network asked for on the command line; None leaves the spec's value."""

    nic_bandwidth_Bps: float | None = None  # every NIC's port speed, per direction
    nics_per_node: int | None = None  # NICs in every node type
    oversubscription: float | None = None  # fabric leaf downlink : uplink capacity

    @property
    def given(self) -> bool:
        """Whether anything is overridden."""
        return any(v is not None for v in (self.nic_bandwidth_Bps, self.nics_per_node, self.oversubscription))

    def describe(self) -> str:
        """``NIC 800 Gb/s, 4 NICs per node, oversubscription 2:1``, or ``as specified``."""
        parts = []
        if self.nic_bandwidth_Bps is not None:
            parts.append(f"NIC {self.nic_bandwidth_Bps * 8 / 1e9:g} Gb/s")
        if self.nics_per_node is not None:
            parts.append(f"{self.nics_per_node} NICs per node")
        if self.oversubscription is not None:
            parts.append(f"oversubscription {self.oversubscription:g}:1")
        return ", ".join(parts) or "as specified"

    def record(self) -> dict[str, Any]:
        """The overrides as a JSON record (null where the spec's value stands); NIC rate in Gb/s."""
        rate = self.nic_bandwidth_Bps
        return {
            "nic_bandwidth_Gbps": None if rate is None else rate * 8 / 1e9,
            "nics_per_node": self.nics_per_node,
            "oversubscription": self.oversubscription,
        }


def network_overrides(
    nic_bandwidth: str | float | None = None,
    nics_per_node: int | None = None,
    oversubscription: str | float | None = None,
) -> NetworkOverrides:
    """Checked overrides: a NIC rate such as ``800Gb/s`` within the NIC port range, a NIC count >= 1,
    an oversubscription such as ``2`` or ``"2:1"`` within its range; a :class:`SpecError` otherwise."""
    rate = None
    if nic_bandwidth is not None:
        rate = physical_quantity(parse_bandwidth, nic_bandwidth, "--nic-bandwidth", "nic_port")
    if nics_per_node is not None:
        if isinstance(nics_per_node, bool) or not isinstance(nics_per_node, int) or nics_per_node < 1:
            raise SpecError(f"--nics-per-node: {nics_per_node!r} is not allowed; it must be an integer >= 1")
        check_bound(DEVICES_PER_NODE, nics_per_node, "--nics-per-node")
    ratio = None
    if oversubscription is not None:
        ratio = parse_oversubscription(oversubscription, "--oversubscription")
    return NetworkOverrides(rate, nics_per_node, ratio)


def apply_network(spec: ClusterSpec, overrides: NetworkOverrides) -> ClusterSpec:
    """``spec`` with the overridden NICs in every node type and the overridden fabric ratio."""
    if not overrides.given:
        return spec
    types = {name: _node_type(t, overrides, spec.name) for name, t in spec.node_types.items()}
    fabric = spec.fabric
    if overrides.oversubscription is not None:
        fabric = replace(fabric, oversubscription=overrides.oversubscription)
    return replace(spec, node_types=MappingProxyType(types), fabric=fabric)


def _node_type(node_type: NodeType, overrides: NetworkOverrides, cluster: str) -> NodeType:
    nics = node_type.nics
    count = overrides.nics_per_node
    if count is None:
        if overrides.nic_bandwidth_Bps is None:
            return node_type
        devices = tuple(_with_port(d, overrides.nic_bandwidth_Bps) for d in node_type.devices)
        return replace(node_type, devices=devices)
    if not nics:
        raise SpecError(
            f"{cluster}: node type {node_type.name!r} has no NICs, so --nics-per-node has nowhere to "
            "attach them; use a cluster whose nodes have a NIC"
        )
    sources = [nics[j * len(nics) // count] for j in range(count)]
    new = [
        replace(_with_port(src, overrides.nic_bandwidth_Bps), local=f"nic{j}")
        for j, src in enumerate(sources)
    ]
    return replace(
        node_type,
        devices=_devices_with(node_type.devices, new, cluster, node_type.name),
        links=_links_with(node_type.links, sources, {d.local for d in nics}, cluster, node_type.name),
    )


def _with_port(device: DeviceDecl, port_Bps: float | None) -> DeviceDecl:
    if device.kind != "nic" or port_Bps is None:
        return device
    return replace(device, port_Bps=port_Bps)


def _devices_with(
    devices: tuple[DeviceDecl, ...], nics: list[DeviceDecl], cluster: str, type_name: str
) -> tuple[DeviceDecl, ...]:
    """The node's devices with its NICs replaced by ``nics``, placed where its first NIC was."""
    first = next(i for i, d in enumerate(devices) if d.kind == "nic")
    others = [d for d in devices if d.kind != "nic"]
    clash = {d.local for d in others} & {n.local for n in nics}
    if clash:
        raise SpecError(
            f"{cluster}: node type {type_name!r} has a non-NIC device named {sorted(clash)[0]!r}, "
            "so --nics-per-node cannot name its NICs nic0, nic1, ..."
        )
    before = sum(1 for d in devices[:first] if d.kind != "nic")
    result = (*others[:before], *nics, *others[before:])
    check_bound(DEVICES_PER_NODE, len(result), f"--nics-per-node on {cluster}", f"the devices of {type_name}")
    return result


def _links_with(
    links: tuple[LinkDecl, ...], sources: list[DeviceDecl], old: set[str], cluster: str, type_name: str
) -> tuple[LinkDecl, ...]:
    """Links not touching a NIC, then each new NIC ``nic{j}`` linked where its source NIC was."""
    kept = [link for link in links if link.a not in old and link.b not in old]
    for j, src in enumerate(sources):
        for link in links:
            if src.local not in (link.a, link.b) or (link.a in old and link.b in old):
                continue  # a NIC-to-NIC link has no place to go once the NICs are renumbered
            name = f"nic{j}"
            kept.append(replace(link, a=name) if link.a == src.local else replace(link, b=name))
    check_bound(LINKS_PER_NODE, len(kept), f"--nics-per-node on {cluster}", f"the links of {type_name}")
    return tuple(kept)
