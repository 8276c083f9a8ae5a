"""Routes for planning, reused across identical hosts.

A collective over many nodes asks for the same intra-node paths on every node (GPU to GPU, GPU to
NIC). Node names follow the topology contract ``"h{host}/{local}"``, so a path found inside host
A between two local names is, renamed, the path inside any host of the same ``host_type``
(the network's router makes the same assumption). Routes that leave the host, and hosts without
that naming or without a ``host_type``, go to the router every time.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.collectives.plan import Route
from simcore.topology import Topology

__all__ = ["host_templated"]


def _split(name: str) -> tuple[str, str] | None:
    prefix, sep, local = name.partition("/")
    return (prefix, local) if sep and prefix.startswith("h") and prefix[1:].isdigit() else None


def _localised(path: Route, prefix: str) -> tuple[tuple[str, str], ...] | None:
    """``path`` in local names if it stays inside host ``prefix``, else None."""
    local: list[tuple[str, str]] = []
    for u, v in path:
        pu, pv = _split(u), _split(v)
        if pu is None or pv is None or pu[0] != prefix or pv[0] != prefix:
            return None
        local.append((pu[1], pv[1]))
    return tuple(local)


def host_templated(topology: Topology, route: Callable[[str, str], Route]) -> Callable[[str, str], Route]:
    """``route`` with intra-host paths cached per (host type, local source, local destination)."""
    nodes = topology.graph.nodes
    templates: dict[tuple[str, str, str], tuple[tuple[str, str], ...] | None] = {}

    def templated(src: str, dst: str) -> Route:
        a, b = _split(src), _split(dst)
        if a is None or b is None or a[0] != b[0]:
            return route(src, dst)
        host_type = str(nodes[src].get("host_type", ""))
        if not host_type:
            return route(src, dst)
        key = (host_type, a[1], b[1])
        if key not in templates:
            path = route(src, dst)
            templates[key] = _localised(path, a[0])
            return path
        template = templates[key]
        if template is None:
            return route(src, dst)
        prefix = a[0]
        return tuple((f"{prefix}/{u}", f"{prefix}/{v}") for u, v in template)

    return templated
