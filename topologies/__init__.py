"""Cluster topologies: presets as data, builders for multi-node fabrics, user YAML specs and
``nvidia-smi topo -m`` import, all producing :class:`simcore.topology.Topology`.

``load_cluster("dgx-a100", gpus=16)`` is two DGX A100 servers on their default fabric with the
first 16 GPUs as ranks; ``load_cluster("my_cluster.yaml")`` reads a user spec (format in
:mod:`topologies.spec`); a ``.txt`` file is read as an ``nvidia-smi topo -m`` capture
(:mod:`topologies.nvsmi`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from simcore.topology import Topology, TopologyError
from topologies.builders import build_cluster, with_overrides
from topologies.catalog import parse_spec, preset_names, preset_spec
from topologies.cpu import cpu_cluster
from topologies.explicit import is_explicit, parse_explicit
from topologies.network import NetworkOverrides, apply_network, network_overrides
from topologies.nvsmi_graph import load_capture_spec
from topologies.spec import FABRIC_TYPES, parse_oversubscription
from topologies.spec_types import ClusterSpec, FabricSpec
from topologies.yamlcheck import SpecError, read_yaml

__all__ = [
    "NetworkOverrides",
    "cpu_cluster",
    "load_cluster",
    "mixed_cluster",
    "network_overrides",
    "preset_names",
]

_FABRIC_ALIASES = {"rail-optimized": "rail-optimised", "rail": "rail-optimised"}


def load_cluster(
    name_or_path: str,
    *,
    gpus: int | None = None,
    nodes: int | None = None,
    fabric: str | None = None,
    oversubscription: float | None = None,
    network: NetworkOverrides | None = None,
) -> Topology:
    """A validated cluster: a preset name, a YAML spec file, or an ``nvidia-smi topo -m`` capture.

    ``gpus`` places that many ranks (adding servers as needed: 16 on ``dgx-a100`` is two servers);
    ``nodes`` fixes the server count; ``fabric`` (``leaf-spine``, ``rail-optimised``, ``none``) and
    ``oversubscription`` (>= 1, leaf downlink : uplink) override the spec's fabric; ``network``
    changes NIC speed, NICs per node and oversubscription (:mod:`topologies.network`); an
    ``oversubscription`` given here wins over the one in ``network``.
    """
    fabric_type = None
    if fabric is not None:
        fabric_type = _FABRIC_ALIASES.get(fabric, fabric)
        if fabric_type not in FABRIC_TYPES:
            raise SpecError(f"fabric {fabric!r} is not known; allowed: {', '.join(FABRIC_TYPES)}")
    ratio = None if oversubscription is None else parse_oversubscription(oversubscription, "oversubscription")
    text = str(name_or_path)
    preset = ""
    if text in preset_names():
        spec, preset = preset_spec(text), text
    elif Path(text).suffix.lower() in (".txt", ".topo", ".nvsmi"):
        spec = load_capture_spec(text)
    elif Path(text).suffix.lower() in (".yaml", ".yml") or Path(text).exists():
        data = read_yaml(text)
        if is_explicit(data):
            if network is not None and network.given:
                raise SpecError(
                    f"{text}: a graph: spec fixes its NICs and fabric; network overrides do not apply"
                )
            return _explicit(data, text, gpus, nodes, fabric_type, ratio)
        spec = parse_spec(data, text, default_name=Path(text).stem, base_dir=Path(text).parent)
    else:
        raise SpecError(
            f"unknown topology {text!r}; presets: {', '.join(preset_names())}, "
            "or a cluster spec .yaml / nvidia-smi topo -m .txt file"
        )
    if network is not None:
        spec = apply_network(spec, network)
    try:
        return build_cluster(
            spec,
            gpus=gpus,
            nodes=nodes,
            fabric=with_overrides(spec.fabric, fabric_type, ratio),
            preset=preset,
        )
    except TopologyError as exc:
        raise SpecError(f"{text}: {exc}") from None


def mixed_cluster(
    parts: Sequence[tuple[str, int]], *, fabric: FabricSpec | None = None, name: str = ""
) -> Topology:
    """A heterogeneous cluster of presets' servers, e.g. ``[("dgx-a100", 2), ("g5.12xlarge", 2)]``.

    Without ``fabric``, the servers share the default fabric of the part with the slowest NIC (the
    network every server can join), with in-network reduction only if every part's fabric has it.
    """
    if not parts:
        raise SpecError("mixed_cluster needs at least one (preset, count) part")
    specs = [preset_spec(preset) for preset, _ in parts]
    if fabric is None:
        slowest = min(specs, key=lambda s: min(n.port_Bps for n in s.node_types[s.name].nics))
        reductions = {s.fabric.in_network_reduction for s in specs}
        fabric = replace(
            slowest.fabric, in_network_reduction=reductions.pop() if len(reductions) == 1 else ""
        )
    types = {s.name: s.node_types[s.name] for s in specs}
    nodes = tuple((preset, count) for preset, count in parts)
    label = name or "+".join(f"{count}x{preset}" for preset, count in parts)
    return build_cluster(ClusterSpec(label, MappingProxyType(types), nodes, fabric), fabric=fabric)


def _explicit(
    data: object,
    path: str,
    gpus: int | None,
    nodes: int | None,
    fabric: str | None,
    oversubscription: float | None,
) -> Topology:
    """An explicit-graph spec: only ``gpus`` (the first N ranks) applies."""
    if nodes is not None or fabric is not None or oversubscription is not None:
        raise SpecError(f"{path}: a graph: spec fixes its nodes and fabric; only gpus= can be given")
    try:
        topo = parse_explicit(data, path, default_name=Path(path).stem)
    except TopologyError as exc:
        raise SpecError(f"{path}: {exc}") from None
    if gpus is None:
        return topo
    if not 1 <= gpus <= topo.world_size:
        raise SpecError(f"{path}: gpus={gpus} is not allowed; this graph has 1..{topo.world_size} ranks")
    return topo.subset(range(gpus))
