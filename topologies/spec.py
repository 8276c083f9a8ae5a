"""Reading the cluster spec: node types (devices + links inside a server), how many of each, the fabric.

The parsed form is :mod:`topologies.spec_types`; node types a file names but does not declare are
resolved by the caller (:func:`topologies.catalog.parse_spec` takes them from the presets).

Presets (``topologies/presets/*.yaml``) and users' own cluster files share this format::

    name: my-cluster                # optional; defaults to the file name
    description: free text          # optional
    node_types:
      g5-like:                      # any name; it becomes each server's host_type
        source: where the figures come from
        devices:                    # local device name (brace ranges allowed) -> attributes
          gpu{0..3}: {kind: gpu, spec: a10g}     # spec: a name from simcore.hardware.device_names()
          cpu0: {kind: cpu, vendor: amd}          # vendor (optional): intel | amd | arm
          nic0: {kind: nic, port: 40Gb/s}         # port: the NIC's network speed (per direction)
          nvswitch: {kind: switch, in_network_reduction: nvls}
        link_classes:               # per-direction bandwidth, one-way latency, physical kind
          pcie-gen4-x16: {kind: pcie, bandwidth: 31.5GB/s, latency: 0.6us, source: "..."}
          # optional per class: efficiency (0-1], the measured fraction of the rate software
          # reaches; default: the achievable-bandwidth table (simcore/data/links.yaml)
        links:                      # full-duplex links; equal-length lists pair up, one name broadcasts
          - {between: [gpu{0..3}, cpu0], class: pcie-gen4-x16}
        ranks: gpu{0..3}            # optional: rank devices in order (default: GPUs, else CPUs with a spec)
        p2p: false                  # optional (default true): GPUs cannot reach each other peer-to-peer
                                    # over PCIe (VMs without P2P, GeForce cards), so NCCL stages
                                    # their traffic through host memory (SHM)
      from-capture:                 # or: a node type read from an `nvidia-smi topo -m` capture
        capture: topo.txt           # path relative to this file (see topologies/nvsmi_graph.py)
        gpu: a10g                   # device spec (optional if the capture has `nvidia-smi -L` lines)
        nic_port: 40Gb/s            # optional: NIC speed (default by GPU generation)
    nodes:                          # servers in host order; a type not declared above is a preset's
      - {type: g5-like, count: 2}   # node type, so mixed clusters can say {type: dgx-a100, count: 2}
    fabric:                         # how the servers' NICs are joined (see FABRIC_TYPES)
      type: leaf-spine              # leaf-spine | rail-optimised | none (single server only)
      link_kind: ethernet           # ib | roce | efa | ethernet | loopback
      nic_latency: 10us             # NIC <-> leaf/rail link, one way
      switch_latency: 1us           # leaf/rail <-> spine link, one way
      oversubscription: 1           # leaf downlink : uplink capacity, e.g. 1, 2, 4 or "2:1" (quoted!)
      nics_per_leaf: 32             # leaf-spine only: NIC ports per leaf
      in_network_reduction: ""      # "sharp" where the switches reduce in the network
      collnet: false                # NCCL_COLLNET_ENABLE=1 and the SHARP plugin are set up (default off)
      efficiency: 0.9               # optional: measured fraction of the NIC rate (default: links.yaml)
      nccl_env: {NCCL_PROTO: simple}  # optional: NCCL variables the fabric's network plugin sets
      source: "..."

Kinds: devices gpu|cpu|nic|switch|pcie; links nvlink|nvswitch|pcie|ib|roce|efa|ethernet|smp|loopback|memory.
A CPU-only cluster gives its rank devices ``kind: cpu`` and ``spec: cpu`` and joins them with a
``loopback`` link class (processes on one machine) or an Ethernet fabric (several machines).
Every bandwidth must be > 0 and the graph connected; :meth:`Topology.validate` rejects the rest.
Sizes are bounded (:mod:`simcore.limits`: GPUs per cluster, devices and links per node, checked
before a brace range or a node count is expanded, in :mod:`topologies.sizes`), every number must
lie in its physical range (``simcore/data/physical_ranges.yaml``, with sources), and names and free
text (``name``, ``description``, ``source``) must be short text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simcore.hardware import device_names
from simcore.limits import DEVICES_PER_NODE, LINKS_PER_NODE, Bound
from simcore.topology import LINK_KINDS, NODE_KINDS
from simcore.units import parse_bandwidth, parse_time
from topologies.nvsmi import read_capture
from topologies.nvsmi_graph import capture_node_type
from topologies.sizes import check_node_counts
from topologies.spec_types import ClusterSpec, DeviceDecl, FabricSpec, LinkDecl, NodeType
from topologies.yamlcheck import (
    SpecError,
    check_bound,
    expand_braces,
    mapping,
    name_field,
    physical_quantity,
    shown,
    text_field,
)

__all__ = [
    "FABRIC_TYPES",
    "UndeclaredNodeType",
    "parse_cluster_spec",
    "parse_device",
    "parse_efficiency",
    "parse_fabric",
    "parse_link_classes",
    "parse_links",
    "parse_oversubscription",
]

FABRIC_TYPES = ("leaf-spine", "rail-optimised", "none")
FABRIC_LINK_KINDS = ("ib", "roce", "efa", "ethernet", "loopback")
CPU_VENDORS = ("", "intel", "amd", "arm")
REDUCTIONS = ("", "nvls", "sharp")
_ALIASES = {"rail-optimized": "rail-optimised", "rail": "rail-optimised", "leafspine": "leaf-spine"}


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    text = "" if value is None else value
    if not isinstance(text, str) or text not in allowed:
        listed = ", ".join(repr(a) if a == "" else a for a in allowed)
        raise SpecError(f"{where}: {shown(value)} is not allowed; allowed: {listed}")
    return text


def parse_device(local: str, value: Any, where: str) -> DeviceDecl:
    attrs = mapping(value, where, ("kind",), ("spec", "port", "in_network_reduction", "vendor"))
    kind = _choice(attrs["kind"], NODE_KINDS, f"{where}.kind")
    spec = name_field(attrs["spec"], f"{where}.spec") if "spec" in attrs else ""
    if spec and spec not in device_names():
        raise SpecError(f"{where}.spec: unknown device {shown(spec)}; known: {', '.join(device_names())}")
    if spec and kind not in ("gpu", "cpu"):
        raise SpecError(f"{where}.spec: only gpu and cpu devices take a spec, not {kind}")
    if kind == "gpu" and not spec:
        raise SpecError(f"{where}: a gpu needs 'spec'; known: {', '.join(device_names())}")
    port = 0.0
    if kind == "nic":
        if "port" not in attrs:
            raise SpecError(f"{where}: a nic needs 'port' (its network speed, e.g. 200Gb/s)")
        port = physical_quantity(parse_bandwidth, attrs["port"], f"{where}.port", "nic_port")
    elif "port" in attrs:
        raise SpecError(f"{where}.port: only nic devices have a port speed")
    reduction = _choice(attrs.get("in_network_reduction", ""), REDUCTIONS, f"{where}.in_network_reduction")
    if reduction and kind != "switch":
        raise SpecError(f"{where}.in_network_reduction: only switch devices reduce in the network")
    vendor = _choice(attrs.get("vendor", ""), CPU_VENDORS, f"{where}.vendor")
    if vendor and kind != "cpu":
        raise SpecError(f"{where}.vendor: only cpu devices have a vendor")
    return DeviceDecl(local, kind, spec, port, reduction, vendor)


def parse_efficiency(value: Any, where: str) -> float:
    """A measured fraction of a link's rate: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SpecError(f"{where}: {value!r} is not allowed; efficiency must be a number in (0, 1]")
    return float(value)


def parse_link_classes(value: Any, where: str) -> dict[str, tuple[str, float, float, float | None]]:
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{where}: expected a mapping of class name -> {{kind, bandwidth, latency}}")
    classes = {}
    for key, attrs in value.items():
        name = name_field(key, f"{where}: a link class name")
        at = f"{where}.{name}"
        attrs = mapping(attrs, at, ("kind", "bandwidth", "latency"), ("source", "efficiency"))
        kind = _choice(attrs["kind"], LINK_KINDS, f"{at}.kind")
        text_field(attrs.get("source"), f"{at}.source")
        classes[name] = (
            kind,
            physical_quantity(parse_bandwidth, attrs["bandwidth"], f"{at}.bandwidth", "link_bandwidth"),
            physical_quantity(parse_time, attrs["latency"], f"{at}.latency", "link_latency"),
            parse_efficiency(attrs["efficiency"], f"{at}.efficiency") if "efficiency" in attrs else None,
        )
    return classes


def parse_links(
    value: Any,
    classes: dict[str, tuple[str, float, float, float | None]],
    known: set[str],
    where: str,
    bounds: tuple[Bound, Bound] = (DEVICES_PER_NODE, LINKS_PER_NODE),
) -> list[LinkDecl]:
    """The ``links`` list; ``bounds`` caps the names one pattern stands for and the links in all."""
    if not isinstance(value, list):
        raise SpecError(f"{where}: expected a list of {{between: [a, b], class: name}}")
    links: list[LinkDecl] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        item = mapping(item, at, ("between", "class"))
        ends = item["between"]
        if not isinstance(ends, list) or len(ends) != 2:
            raise SpecError(f"{at}.between: expected two device names, e.g. [gpu{{0..7}}, nvswitch]")
        side_a, side_b = (expand_braces(e, f"{at}.between", bounds[0]) for e in ends)
        if len(side_a) != len(side_b) and 1 not in (len(side_a), len(side_b)):
            raise SpecError(
                f"{at}.between: {len(side_a)} and {len(side_b)} names cannot pair up; "
                "use equal lengths or a single name on one side"
            )
        n = max(len(side_a), len(side_b))
        check_bound(bounds[1], len(links) + n, at, "the links up to here")
        side_a, side_b = (s * n if len(s) == 1 else s for s in (side_a, side_b))
        cls = name_field(item["class"], f"{at}.class")
        if cls not in classes:
            raise SpecError(f"{at}.class: unknown link class {shown(cls)}; defined: {', '.join(classes)}")
        kind, bandwidth, latency, efficiency = classes[cls]
        for a, b in zip(side_a, side_b, strict=True):
            for end in (a, b):
                if end not in known:
                    raise SpecError(
                        f"{at}.between: unknown device {shown(end)}; devices: {_listed(sorted(known))}"
                    )
            if a == b:
                raise SpecError(f"{at}.between: a link from {a!r} to itself")
            links.append(LinkDecl(a, b, cls, kind, bandwidth, latency, efficiency))
    return links


def _capture_node_type(name: str, value: dict[str, Any], where: str, base_dir: Path | None) -> NodeType:
    """A node type read from an ``nvidia-smi topo -m`` capture (path relative to the spec file)."""
    attrs = mapping(value, where, ("capture",), ("gpu", "nic_port", "source", "description"))
    path = Path(text_field(attrs["capture"], f"{where}.capture"))
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    port = (
        physical_quantity(parse_bandwidth, attrs["nic_port"], f"{where}.nic_port", "nic_port")
        if "nic_port" in attrs
        else None
    )
    gpu = name_field(attrs["gpu"], f"{where}.gpu") if attrs.get("gpu") is not None else None
    for key in ("source", "description"):
        text_field(attrs.get(key), f"{where}.{key}")
    return capture_node_type(read_capture(path), name, gpu=gpu, nic_port_Bps=port)


def parse_node_type(name: str, value: Any, where: str, base_dir: Path | None = None) -> NodeType:
    """One entry of ``node_types``: devices and links, or ``capture:`` an nvidia-smi topo -m file."""
    if isinstance(value, dict) and "capture" in value:
        return _capture_node_type(name, value, where, base_dir)
    attrs = mapping(
        value, where, ("devices", "links"), ("link_classes", "ranks", "source", "description", "p2p")
    )
    if not isinstance(attrs["devices"], dict) or not attrs["devices"]:
        raise SpecError(f"{where}.devices: expected a mapping of device name -> {{kind, ...}}")
    devices: dict[str, DeviceDecl] = {}
    for pattern, dev in attrs["devices"].items():
        names = expand_braces(pattern, f"{where}.devices")
        check_bound(DEVICES_PER_NODE, len(devices) + len(names), f"{where}.devices", "the devices up to here")
        for local in names:
            if local in devices or "/" in local:
                raise SpecError(f"{where}.devices: device name {shown(local)} is repeated or contains '/'")
            devices[local] = parse_device(local, dev, f"{where}.devices.{pattern}")
    classes = parse_link_classes(attrs.get("link_classes"), f"{where}.link_classes") if attrs["links"] else {}
    links = parse_links(attrs["links"], classes, set(devices), f"{where}.links")
    for key in ("source", "description"):
        text_field(attrs.get(key), f"{where}.{key}")
    if "ranks" in attrs:
        ranks = tuple(r for p in _as_list(attrs["ranks"]) for r in expand_braces(p, f"{where}.ranks"))
        check_bound(DEVICES_PER_NODE, len(ranks), f"{where}.ranks")
        bad = [r for r in ranks if r not in devices or not devices[r].spec]
        if bad:
            raise SpecError(
                f"{where}.ranks: {shown(bad[0])} is not a device with a spec (gpu, or cpu with spec: cpu)"
            )
    else:
        gpus = tuple(d.local for d in devices.values() if d.kind == "gpu")
        ranks = gpus or tuple(d.local for d in devices.values() if d.kind == "cpu" and d.spec)
    if not ranks:
        raise SpecError(f"{where}: no rank devices; add a gpu, or a cpu with 'spec: cpu'")
    p2p = attrs.get("p2p", True)
    if not isinstance(p2p, bool):
        raise SpecError(f"{where}.p2p: {p2p!r} is not allowed; use true or false")
    return NodeType(
        name, tuple(devices.values()), tuple(links), ranks, text_field(attrs.get("source"), where), p2p
    )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _listed(names: list[str], most: int = 12) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")


def parse_oversubscription(value: Any, where: str) -> float:
    """``2``, ``2.0`` or ``"2:1"`` -> 2.0 (downlink : uplink capacity at a leaf), within its physical range."""
    try:
        if isinstance(value, bool) or (isinstance(value, str) and len(value) > 64):
            raise TypeError
        if isinstance(value, str) and ":" in value:
            down, up = value.split(":", 1)
            ratio = float(down) / float(up)
        else:
            ratio = float(value)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        raise SpecError(f"{where}: {shown(value)} is not a ratio; use e.g. 1, 2, 4 or '2:1'") from None
    return physical_quantity(lambda _: ratio, value, where, "oversubscription")


def parse_fabric(value: Any, where: str) -> FabricSpec:
    """The ``fabric`` section."""
    keys = (
        "link_kind",
        "nic_latency",
        "switch_latency",
        "oversubscription",
        "nics_per_leaf",
        "in_network_reduction",
        "source",
        "collnet",
        "efficiency",
        "nccl_env",
    )
    attrs = mapping(value, where, ("type",), keys)
    collnet = attrs.get("collnet", False)
    if not isinstance(collnet, bool):
        raise SpecError(f"{where}.collnet: {collnet!r} is not allowed; use true or false")
    raw_type = attrs["type"]
    ftype = _choice(
        _ALIASES.get(raw_type, raw_type) if isinstance(raw_type, str) else raw_type,
        FABRIC_TYPES,
        f"{where}.type",
    )
    default = FabricSpec()
    nics_per_leaf = attrs.get("nics_per_leaf", default.nics_per_leaf)
    if not isinstance(nics_per_leaf, int) or isinstance(nics_per_leaf, bool) or nics_per_leaf < 1:
        raise SpecError(
            f"{where}.nics_per_leaf: {shown(nics_per_leaf)} is not allowed; it must be an integer >= 1"
        )
    physical_quantity(float, nics_per_leaf, f"{where}.nics_per_leaf", "nics_per_leaf")
    return FabricSpec(
        type=ftype,
        link_kind=_choice(attrs.get("link_kind", default.link_kind), FABRIC_LINK_KINDS, f"{where}.link_kind"),
        nic_latency_s=physical_quantity(
            parse_time, attrs.get("nic_latency", "1us"), f"{where}.nic_latency", "link_latency"
        ),
        switch_latency_s=physical_quantity(
            parse_time, attrs.get("switch_latency", "300ns"), f"{where}.switch_latency", "link_latency"
        ),
        oversubscription=parse_oversubscription(
            attrs.get("oversubscription", 1), f"{where}.oversubscription"
        ),
        nics_per_leaf=nics_per_leaf,
        in_network_reduction=_choice(
            attrs.get("in_network_reduction", ""), REDUCTIONS, f"{where}.in_network_reduction"
        ),
        source=text_field(attrs.get("source"), f"{where}.source"),
        collnet=collnet,
        efficiency=parse_efficiency(attrs["efficiency"], f"{where}.efficiency")
        if "efficiency" in attrs
        else None,
        nccl_env=parse_nccl_env(attrs.get("nccl_env", {}), f"{where}.nccl_env"),
    )


NCCL_ENV_KEYS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_BUFFSIZE",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE",
    "NCCL_NVLS_ENABLE",
    "OFI_NCCL_NET_LATENCY",  # aws-ofi-nccl's reported network latency (checked by NcclOptions.from_env)
)
_NCCL_SIZE_KEYS = ("NCCL_BUFFSIZE", "NCCL_NVLS_CHUNKSIZE", "NCCL_NVLSTREE_MAX_CHUNKSIZE")


def parse_nccl_env(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``fabric.nccl_env``: NCCL variables the fabric's network plugin sets, checked as NCCL reads them."""
    if not isinstance(value, dict):
        raise SpecError(f"{where}: {shown(value)} is not allowed; give a mapping of NCCL variables to values")
    env: dict[str, str] = {}
    for name, raw in value.items():
        if name not in NCCL_ENV_KEYS:
            raise SpecError(f"{where}: {shown(name)} is not allowed; allowed: {', '.join(NCCL_ENV_KEYS)}")
        if not isinstance(raw, str | int) or isinstance(raw, bool):
            raise SpecError(f"{where}.{name}: {shown(raw)} is not allowed; give a string or a whole number")
        text = str(raw).strip()
        if name in _NCCL_SIZE_KEYS and not (text.isdigit() and 4096 <= int(text) <= 2**31):
            raise SpecError(
                f"{where}.{name}: {shown(raw)} is not allowed; give a byte count from 4096 to 2147483648"
            )
        env[name] = text
    # NCCL_ALGO / NCCL_PROTO lists are checked where the collectives read them (NcclOptions.from_env).
    return tuple(sorted(env.items()))


UndeclaredNodeType = Callable[[str, tuple[str, ...], str], NodeType]
"""How a spec resolves a node type its file does not declare: ``(name, declared, where) -> NodeType``,
raising :class:`SpecError` when it cannot (:func:`topologies.catalog.preset_node_type` looks in
the presets)."""


def parse_cluster_spec(
    data: Any,
    where: str,
    *,
    undeclared: UndeclaredNodeType,
    default_name: str = "",
    base_dir: Path | None = None,
) -> ClusterSpec:
    """A whole cluster spec document; ``where`` (the file) prefixes every error.

    A node type the file does not declare is resolved by ``undeclared`` (see :data:`UndeclaredNodeType`).
    """
    attrs = mapping(data, where, ("nodes", "fabric"), ("name", "description", "node_types"))
    declared = attrs.get("node_types", {})
    if not isinstance(declared, dict):
        raise SpecError(f"{where}: node_types: expected a mapping of node type name -> {{devices, links}}")
    types: dict[str, NodeType] = {}
    for key, value in declared.items():
        name = name_field(key, f"{where}: node_types: a node type name")
        types[name] = parse_node_type(name, value, f"{where}: node_types.{name}", base_dir)
    if not isinstance(attrs["nodes"], list) or not attrs["nodes"]:
        raise SpecError(f"{where}: nodes: expected a list of {{type: NAME, count: N}}")
    nodes: list[tuple[str, int]] = []
    for i, item in enumerate(attrs["nodes"]):
        at = f"{where}: nodes[{i}]"
        item = mapping(item, at, ("type",), ("count",))
        tname = name_field(item["type"], f"{at}.type")
        if tname not in types:
            types[tname] = undeclared(tname, tuple(types), f"{at}.type")
        count = item.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise SpecError(f"{at}.count: {shown(count)} is not allowed; it must be an integer >= 1")
        check_node_counts(types, [*nodes, (tname, count)], f"{at}.count")
        nodes.append((tname, count))
    fabric = parse_fabric(attrs["fabric"], f"{where}: fabric")
    name = name_field(attrs["name"], f"{where}: name") if attrs.get("name") is not None else default_name
    description = text_field(attrs.get("description"), f"{where}: description")
    return ClusterSpec(name, MappingProxyType(types), tuple(nodes), fabric, description)
