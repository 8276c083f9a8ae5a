"""A cluster written out device by device: the ``graph:`` form of a cluster spec file.

For clusters no node-type template fits, list every device by its full graph name and every link::

    name: tiny-ring
    graph:
      devices:                       # host comes from the "h{host}/" prefix; unprefixed = fabric (-1)
        h0/gpu{0..1}: {kind: gpu, spec: a10g}
        h1/gpu{0..1}: {kind: gpu, spec: a10g}
        h0/nic0: {kind: nic, port: 100Gb/s}
        h1/nic0: {kind: nic, port: 100Gb/s}
        switch0: {kind: switch}
      link_classes:
        pcie: {kind: pcie, bandwidth: 31.5GB/s, latency: 0.75us}
        eth: {kind: ethernet, bandwidth: 12.5GB/s, latency: 10us}
      links:
        - {between: ["h0/gpu{0..1}", h0/nic0], class: pcie}
        - {between: ["h1/gpu{0..1}", h1/nic0], class: pcie}
        - {between: ["h{0..1}/nic0", switch0], class: eth}
      ranks: ["h0/gpu{0..1}", "h1/gpu{0..1}"]   # optional: default every device with a spec, host order

Device attributes and link classes are those of :mod:`topologies.spec`.
"""

from __future__ import annotations

import re
from typing import Any

from simcore.digraph import DiGraph
from simcore.limits import DEVICES_PER_CLUSTER, GPUS_PER_CLUSTER, LINKS_PER_CLUSTER
from simcore.net.achievable import achievable_fraction
from simcore.topology import Topology
from topologies.spec import parse_device, parse_link_classes, parse_links
from topologies.yamlcheck import SpecError, check_bound, expand_braces, mapping, name_field, shown, text_field

__all__ = ["is_explicit", "parse_explicit"]

_HOST = re.compile(r"h(\d+)/.+")


def is_explicit(data: Any) -> bool:
    """Whether a spec document uses the ``graph:`` form."""
    return isinstance(data, dict) and "graph" in data


def _host_of(name: str) -> int:
    match = _HOST.fullmatch(name)
    return int(match[1]) if match else -1


def _devices(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{where}: expected a mapping of device name -> {{kind, ...}}")
    nodes: dict[str, dict[str, Any]] = {}
    for pattern, attrs in value.items():
        names = expand_braces(pattern, where, DEVICES_PER_CLUSTER)
        check_bound(DEVICES_PER_CLUSTER, len(nodes) + len(names), where, "the devices up to here")
        for name in names:
            if name in nodes:
                raise SpecError(f"{where}: device {shown(name)} is listed twice")
            dev = parse_device(name, attrs, f"{where}.{pattern}")
            node: dict[str, Any] = {"kind": dev.kind, "host": _host_of(name), "host_type": ""}
            if dev.spec:
                node["gpu"] = dev.spec
            if dev.kind == "switch":
                node["in_network_reduction"] = dev.in_network_reduction
            if dev.kind == "nic":
                node["port_Bps"] = dev.port_Bps
            nodes[name] = node
    return nodes


def parse_explicit(data: Any, where: str, default_name: str = "") -> Topology:
    """The validated topology of a ``graph:`` spec document."""
    top = mapping(data, where, ("graph",), ("name", "description"))
    name = name_field(top["name"], f"{where}: name") if top.get("name") is not None else default_name
    text_field(top.get("description"), f"{where}: description")
    body = mapping(top["graph"], f"{where}: graph", ("devices", "links"), ("link_classes", "ranks"))
    nodes = _devices(body["devices"], f"{where}: graph.devices")
    classes = parse_link_classes(body.get("link_classes"), f"{where}: graph.link_classes")
    links = parse_links(
        body["links"], classes, set(nodes), f"{where}: graph.links", (DEVICES_PER_CLUSTER, LINKS_PER_CLUSTER)
    )
    graph = DiGraph()
    graph.add_nodes_from(nodes.items())
    has_gpus = any(n.get("kind") == "gpu" for n in nodes.values())
    for link in links:
        attrs: dict[str, Any] = {
            "bandwidth_Bps": link.bandwidth_Bps,
            "latency_s": link.latency_s,
            "kind": link.kind,
            "link_class": link.link_class,
        }
        if link.efficiency is not None:
            attrs["efficiency"] = link.efficiency
        elif has_gpus:  # a GPU cluster's links run at their achievable rate (simcore/data/links.yaml)
            ends = [str(nodes[e]["gpu"]) for e in (link.a, link.b) if nodes[e].get("kind") == "gpu"]
            attrs["efficiency"] = achievable_fraction(link.kind, ends)
        graph.add_edges_from([(link.a, link.b, attrs), (link.b, link.a, dict(attrs))])
    ranks = _ranks(body.get("ranks"), nodes, f"{where}: graph.ranks")
    per_host: dict[int, int] = {}
    for rank in ranks:
        per_host[nodes[rank]["host"]] = per_host.get(nodes[rank]["host"], 0) + 1
    hosts = sorted({n["host"] for n in nodes.values() if n["host"] >= 0})
    metadata = {
        "gpus_per_host": max(per_host.values()),
        "host_types": ["" for _ in hosts],
        "fabric": "explicit",
        "fabric_link_kind": "",
        "oversubscription": 1.0,
        "preset": "",
        "nodes": len(hosts),
    }
    return Topology(name or default_name, graph, ranks, metadata)


def _ranks(value: Any, nodes: dict[str, dict[str, Any]], where: str) -> list[str]:
    if value is None:
        order = {n: i for i, n in enumerate(nodes)}
        with_spec = [n for n, a in nodes.items() if "gpu" in a]
        if not with_spec:
            raise SpecError(f"{where}: no rank devices; add a gpu, or a cpu with 'spec: cpu'")
        return sorted(with_spec, key=lambda n: (nodes[n]["host"], order[n]))
    patterns = value if isinstance(value, list) else [value]
    ranks = [r for p in patterns for r in expand_braces(p, where, GPUS_PER_CLUSTER)]
    check_bound(GPUS_PER_CLUSTER, len(ranks), where)
    if not ranks:
        raise SpecError(f"{where}: no rank devices listed")
    for rank in ranks:
        if rank not in nodes or "gpu" not in nodes[rank]:
            raise SpecError(
                f"{where}: {shown(rank)} is not a device with a spec (gpu, or cpu with spec: cpu)"
            )
    return ranks
