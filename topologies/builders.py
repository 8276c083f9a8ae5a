"""Build the cluster graph: N servers from node-type templates, joined by a fabric.

Fabrics (switch names carry no host prefix, ``host = -1``):

- ``leaf-spine``: the servers' NICs fill leaves ``leaf{i}`` in host order, ``nics_per_leaf`` each.
  Each leaf has one uplink to ``spine0`` whose capacity is the leaf's downlink capacity (sum of its
  NIC ports) divided by the oversubscription. The spine tier is aggregated into one node: in a
  fluid model a full-bisection set of spines with ideal ECMP carries exactly this, and one
  deterministic route per leaf pair keeps results reproducible.
- ``rail-optimised``: NIC ``i`` of every server sits on rail switch ``rail{i}`` (as in NVIDIA's
  DGX SuperPOD), so same-index GPUs talk through one switch hop; rails join through ``spine0``
  with the same uplink rule as leaves.
- ``none``: a single server, no fabric. A single server gets no fabric switches whatever the type
  (so a lone DGX does not advertise SHARP).

Heterogeneous clusters simply list several node types; every NIC keeps its own port speed, so the
path between a fast and a slow server is limited by the slow server's NIC, as in reality.

Achievable bandwidth: every link of a GPU server, and every fabric link of a cluster with GPUs,
gets an ``efficiency`` (the fraction of its datasheet rate NCCL reaches) from the spec's link class
or fabric when stated there, else from :mod:`simcore.net.achievable`. CPU-only (gloo) clusters
keep the plain rates; calibration measures them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simcore.digraph import DiGraph
from simcore.net.achievable import achievable_fraction
from simcore.topology import Topology
from topologies.sizes import check_cluster_size
from topologies.spec_types import ClusterSpec, FabricSpec, NodeType
from topologies.yamlcheck import SpecError

__all__ = ["build_cluster", "plan_hosts"]

Edge = tuple[str, str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _Template:
    """A node type flattened once: node attributes, both directions of every link, ranks, NICs."""

    nodes: tuple[tuple[str, dict[str, Any]], ...]
    edges: tuple[Edge, ...]
    ranks: tuple[str, ...]
    nics: tuple[tuple[str, float], ...]
    has_gpus: bool


@functools.lru_cache(maxsize=64)
def _template(node_type: NodeType) -> _Template:
    nodes = []
    gpu_of = {d.local: d.spec for d in node_type.devices if d.kind == "gpu"}
    for dev in node_type.devices:
        attrs: dict[str, Any] = {"kind": dev.kind, "host_type": node_type.name}
        if dev.spec:
            attrs["gpu"] = dev.spec
        if dev.kind == "gpu" and not node_type.p2p:
            attrs["p2p"] = False
        if dev.kind == "cpu" and dev.vendor:
            attrs["vendor"] = dev.vendor
        if dev.kind == "switch":
            attrs["in_network_reduction"] = dev.in_network_reduction
        if dev.kind == "nic":
            attrs["port_Bps"] = dev.port_Bps
        nodes.append((dev.local, attrs))
    edges: list[Edge] = []
    for link in node_type.links:
        attrs = {
            "bandwidth_Bps": link.bandwidth_Bps,
            "latency_s": link.latency_s,
            "kind": link.kind,
            "link_class": link.link_class,
        }
        if link.efficiency is not None:
            attrs["efficiency"] = link.efficiency
        elif gpu_of:
            ends = [gpu_of[e] for e in (link.a, link.b) if e in gpu_of]
            attrs["efficiency"] = achievable_fraction(link.kind, ends)
        edges.append((link.a, link.b, attrs))
        edges.append((link.b, link.a, attrs))
    nics = tuple((d.local, d.port_Bps) for d in node_type.nics)
    return _Template(tuple(nodes), tuple(edges), node_type.ranks, nics, bool(gpu_of))


def plan_hosts(spec: ClusterSpec, gpus: int | None, nodes: int | None) -> list[str]:
    """Node type of each host, after applying ``nodes`` (one node type only) and ``gpus``."""
    groups = list(spec.nodes)
    if nodes is not None:
        if nodes < 1:
            raise SpecError(f"{spec.name}: nodes={nodes} is not allowed; it must be >= 1")
        if len(groups) != 1:
            raise SpecError(
                f"{spec.name}: nodes= applies to a single node type; this cluster mixes "
                f"{', '.join(t for t, _ in groups)} (edit the counts in its spec)"
            )
        groups = [(groups[0][0], nodes)]
    elif gpus is not None and len(groups) == 1:
        per_host = len(spec.node_types[groups[0][0]].ranks)
        groups = [(groups[0][0], max(1, math.ceil(gpus / per_host)))]
    hosts = [t for t, count in groups for _ in range(count)]
    if gpus is not None:
        capacity = sum(len(spec.node_types[t].ranks) for t in hosts)
        if gpus < 1 or gpus > capacity:
            raise SpecError(
                f"{spec.name}: gpus={gpus} is not allowed; these {len(hosts)} node(s) hold 1..{capacity}"
            )
        keep, placed = 0, 0
        while placed < gpus:
            placed += len(spec.node_types[hosts[keep]].ranks)
            keep += 1
        hosts = hosts[:keep]
    return hosts


def build_cluster(
    spec: ClusterSpec,
    *,
    gpus: int | None = None,
    nodes: int | None = None,
    fabric: FabricSpec | None = None,
    preset: str = "",
) -> Topology:
    """The validated topology for ``spec``; ranks are the first ``gpus`` rank devices in host order."""
    fabric = fabric or spec.fabric
    check_cluster_size(spec, spec.name, gpus=gpus, nodes=nodes)  # before laying out any server
    hosts = plan_hosts(spec, gpus, nodes)
    graph = DiGraph()  # not networkx's: building a cluster runs no graph algorithm
    ranks: list[str] = []
    nics: list[list[tuple[str, float]]] = []
    for host, type_name in enumerate(hosts):
        tmpl = _template(spec.node_types[type_name])
        prefix = f"h{host}/"
        graph.add_nodes_from((prefix + local, {**attrs, "host": host}) for local, attrs in tmpl.nodes)
        graph.add_edges_from((prefix + a, prefix + b, attrs) for a, b, attrs in tmpl.edges)
        ranks.extend(prefix + r for r in tmpl.ranks)
        nics.append([(prefix + nic, port) for nic, port in tmpl.nics])
    if len(hosts) > 1 or fabric.type == "none":  # one server needs no fabric switches
        _FABRICS[fabric.type](graph, nics, fabric)
        if any(_template(spec.node_types[t]).has_gpus for t in set(hosts)):
            _stamp_fabric(graph, fabric)
    if gpus is not None:
        ranks = ranks[:gpus]
    placed_per_host: dict[int, int] = {}
    for rank in ranks:
        host = int(graph.nodes[rank]["host"])
        placed_per_host[host] = placed_per_host.get(host, 0) + 1
    metadata = {
        "gpus_per_host": max(placed_per_host.values()),
        "host_types": hosts,
        "fabric": fabric.type,
        "fabric_link_kind": fabric.link_kind if fabric.type != "none" else "",
        "oversubscription": fabric.oversubscription,
        "preset": preset,
        "nodes": len(hosts),
        "collnet": bool(fabric.collnet and fabric.in_network_reduction == "sharp" and len(hosts) > 1),
        "nccl_env": dict(fabric.nccl_env),
    }
    name = f"{preset}-x{len(hosts)}" if preset and len(hosts) > 1 else spec.name
    return Topology(name, graph, ranks, metadata)


def with_overrides(fabric: FabricSpec, fabric_type: str | None, oversubscription: float | None) -> FabricSpec:
    """``fabric`` with a different layout and/or oversubscription."""
    changes: dict[str, Any] = {}
    if fabric_type is not None:
        changes["type"] = fabric_type
    if oversubscription is not None:
        changes["oversubscription"] = oversubscription
    return replace(fabric, **changes) if changes else fabric


def _stamp_fabric(graph: DiGraph, fabric: FabricSpec) -> None:
    """Fabric links of a GPU cluster run at the NICs' achievable rate (spec's figure, else the table's)."""
    fraction = fabric.efficiency if fabric.efficiency is not None else achievable_fraction(fabric.link_kind)
    for _, _, attrs in graph.edges(data=True):
        if attrs.get("link_class") in ("fabric-access", "fabric-uplink"):
            attrs["efficiency"] = fraction


def _switch(graph: DiGraph, name: str, fabric: FabricSpec) -> None:
    graph.add_node(
        name, kind="switch", host=-1, host_type="", in_network_reduction=fabric.in_network_reduction
    )


def _duplex(a: str, b: str, bandwidth_Bps: float, latency_s: float, kind: str, link_class: str) -> list[Edge]:
    attrs = {"bandwidth_Bps": bandwidth_Bps, "latency_s": latency_s, "kind": kind, "link_class": link_class}
    return [(a, b, attrs), (b, a, attrs)]


def _attach_switches(
    graph: DiGraph, groups: Sequence[tuple[str, list[tuple[str, float]]]], fabric: FabricSpec
) -> None:
    """Each (switch, NICs) group becomes a switch with access links; several switches share a spine."""
    edges: list[Edge] = []
    for switch, members in groups:
        _switch(graph, switch, fabric)
        for nic, port in members:
            edges += _duplex(nic, switch, port, fabric.nic_latency_s, fabric.link_kind, "fabric-access")
    if len(groups) > 1:
        _switch(graph, "spine0", fabric)
        for switch, members in groups:
            uplink = sum(port for _, port in members) / fabric.oversubscription
            edges += _duplex(
                switch, "spine0", uplink, fabric.switch_latency_s, fabric.link_kind, "fabric-uplink"
            )
    graph.add_edges_from(edges)


def _leaf_spine(graph: DiGraph, nics: list[list[tuple[str, float]]], fabric: FabricSpec) -> None:
    flat = [nic for host in nics for nic in host]
    _require_nics(flat, len(nics))
    per_leaf = fabric.nics_per_leaf
    groups = [
        (f"leaf{i}", flat[start : start + per_leaf]) for i, start in enumerate(range(0, len(flat), per_leaf))
    ]
    _attach_switches(graph, groups, fabric)


def _rail_optimised(graph: DiGraph, nics: list[list[tuple[str, float]]], fabric: FabricSpec) -> None:
    _require_nics([nic for host in nics for nic in host], len(nics))
    rails = max(len(host) for host in nics)
    groups = [(f"rail{i}", [host[i] for host in nics if i < len(host)]) for i in range(rails)]
    _attach_switches(graph, groups, fabric)


def _no_fabric(graph: DiGraph, nics: list[list[tuple[str, float]]], fabric: FabricSpec) -> None:
    if len(nics) > 1:
        raise SpecError(
            f"fabric type 'none' joins nothing, but there are {len(nics)} nodes; "
            "use leaf-spine or rail-optimised"
        )


def _require_nics(flat: list[tuple[str, float]], hosts: int) -> None:
    if hosts > 1 and not flat:
        raise SpecError("the nodes have no NICs (kind: nic), so no fabric can join them")


_FABRICS = {"leaf-spine": _leaf_spine, "rail-optimised": _rail_optimised, "none": _no_fabric}
