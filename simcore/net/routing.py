"""Routes through a cluster graph: the lowest-latency path, found fast on big fabrics.

Graphs that follow the naming convention of :mod:`simcore.topology` (devices inside server ``h``
named ``"h{h}/{local}"``, fabric switches unprefixed, no link between two different servers) are
routed hierarchically, which is what makes 4096-GPU fabrics cheap:

- inside one server, the lowest-latency path inside that server; servers of the same build share
  one cached set of paths (a template in local names, renamed per server);
- between servers, traffic leaves through the source device's *gateway* (the server device with a
  fabric link, normally a NIC) and enters through the destination's gateway. A device's gateway is
  the nearest one by latency, ties going to the rail-aligned one (``gpu3`` -> ``nic3``) and then
  to the first in graph order: the choice NCCL makes, and deterministic. Between the two gateways
  the route is the lowest-latency path through fabric switches only. Where several fabric paths
  tie (the spines of a leaf-spine fabric), the destination gateway's number picks one, as
  InfiniBand's destination-modulo-k routing does, so traffic to different servers spreads over
  the spines instead of piling onto the first.

Any endpoint outside a server (a fabric switch), or a graph that breaks the convention, falls back
to plain Dijkstra by latency over the whole graph.
"""

from __future__ import annotations

import heapq
import itertools
import re
from dataclasses import dataclass
from typing import Any, cast

from simcore.digraph import DiGraph
from simcore.errors import TrainsimError
from simcore.topology import Topology

__all__ = ["Edge", "Router"]

Edge = tuple[str, str]
_TRAILING_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class _HostTemplate:
    """Lowest-latency paths inside one server build, in local names (``"gpu0"``, ``"nic3"``)."""

    graph: DiGraph
    gateways: tuple[str, ...]  # local devices with a link into the fabric, in graph order


# (source gateway, destination gateway, path to the first, path from the second, the second's
# number among its server's gateways), all in local names; None gateways: no way into the fabric
_ServerEnds = tuple[str | None, str | None, tuple[Edge, ...] | None, tuple[Edge, ...] | None, int]


def _rail(local: str) -> int | None:
    match = _TRAILING_NUMBER.search(local)
    return int(match.group(1)) if match else None


class Router:
    """Lowest-latency routes over one topology graph, cached per (src, dst)."""

    def __init__(self, graph: DiGraph, name: str = "") -> None:
        self.graph = graph
        self.name = name
        self._routes: dict[Edge, tuple[Edge, ...]] = {}
        # the raw adjacency dicts (simcore.digraph's layout, which is networkx's): views cost a
        # Python call per lookup, and routing a 4096-GPU fabric does tens of thousands of lookups.
        self._nodes: dict[str, dict[str, object]] = graph._node
        self._succ: dict[str, dict[str, dict[str, float]]] = graph._succ
        self._host_nodes: dict[int, list[str]] = {}
        self._where: dict[str, tuple[int, str]] = {}  # server node -> (host, local name)
        self._fabric_nodes: list[str] = []
        self.hierarchical = self._index_nodes()
        self._fabric_set = set(self._fabric_nodes)
        self._templates: dict[int, _HostTemplate | None] = {}  # host -> template (None: breaks convention)
        self._template_by_signature: dict[tuple[object, ...], _HostTemplate] = {}
        self._template_by_build: dict[tuple[object, ...], _HostTemplate] = {}
        self._local_paths: dict[tuple[int, str], dict[str, list[str]]] = {}
        # (template id, local src, local dst) -> the path's links in local names (None: no path)
        self._local_routes: dict[tuple[int, str, str], tuple[Edge, ...] | None] = {}
        # host -> local link -> the link in graph names; one tuple per link, shared by every route
        # (built for the whole server at once: cheaper than link by link)
        self._host_links: dict[int, dict[Edge, Edge]] = {}
        self._names: dict[int, dict[str, str]] = {}  # host -> local name -> graph node name
        self._server_ends: dict[tuple[int, str, int, str], _ServerEnds] = {}
        self._gateway_cache: dict[tuple[int, str, bool], str | None] = {}
        self._fabric_adjacency: dict[str, list[tuple[str, float]]] | None = None
        self._min_hop_s: float | None = None
        self._fabric_preds: dict[str, tuple[dict[str, list[str]], dict[str, float]]] = {}

    @classmethod
    def for_topology(cls, topology: Topology) -> Router:
        """The router shared by every network on ``topology`` (its graph must not change after)."""
        return topology.derived("router", lambda: cls(topology.graph, topology.name))

    # --- public ----------------------------------------------------------------------------
    def route(self, src: str, dst: str) -> tuple[Edge, ...]:
        """The lowest-latency path from ``src`` to ``dst`` as directed edges (cached)."""
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is None:
            cached = self._routes[key] = self._compute(src, dst)
        return cached

    def gateway(self, device: str, *, outbound: bool = True) -> str | None:
        """The fabric gateway (normally a NIC) ``device`` sends through (or receives through)."""
        parsed = self._parse(device)
        if parsed is None:
            return None
        host, local = parsed
        template = self._template(host)
        if template is None:
            return None
        gw = self._nearest_gateway(template, local, outbound)
        return None if gw is None else f"h{host}/{gw}"

    # --- indexing --------------------------------------------------------------------------
    def _index_nodes(self) -> bool:
        """Group nodes by server; False when a name or ``host`` attribute breaks the convention."""
        follows = True
        for node, attrs in self._nodes.items():
            parsed = _split(node)
            if parsed is None:
                self._fabric_nodes.append(node)
                follows = follows and attrs.get("host", -1) in (-1, None)
                continue
            host = parsed[0]
            follows = follows and attrs.get("host", host) == host
            self._host_nodes.setdefault(host, []).append(node)
            self._where[node] = parsed
        return follows

    def _parse(self, node: str) -> tuple[int, str] | None:
        return self._where.get(node) if self.hierarchical else None

    def _template(self, host: int) -> _HostTemplate | None:
        """The server's internal graph in local names, shared by servers with identical builds.

        None when the server links directly to another server (the graph is not hierarchical there).
        Servers with the same ``host_type``, device names and link count are taken to be wired alike
        (what topology builders produce), which spares reading every link of a 512-server cluster.
        """
        if host not in self._templates:
            nodes = self._host_nodes.get(host, [])
            cut = len(f"h{host}/")
            build = (
                self._nodes[nodes[0]].get("host_type") if nodes else None,
                tuple(n[cut:] for n in nodes),
                sum(len(self._succ[n]) for n in nodes),
            )
            template = self._template_by_build.get(build) if build[0] else None
            if template is None:
                built = self._host_graph(host)
                if built is not None:
                    key, local, gateways = built
                    template = self._template_by_signature.get(key)
                    if template is None:
                        template = self._template_by_signature[key] = _HostTemplate(local, gateways)
                    if build[0]:
                        self._template_by_build[build] = template
            self._templates[host] = template
        return self._templates[host]

    def _host_graph(self, host: int) -> tuple[tuple[object, ...], DiGraph, tuple[str, ...]] | None:
        """(signature, local graph, gateways) of one server, or None if it links to another server."""
        prefix = f"h{host}/"
        cut = len(prefix)
        names: list[str] = []
        gateways: list[str] = []
        edges: list[tuple[str, str, float]] = []
        for node in self._host_nodes.get(host, []):
            name = node[cut:]
            names.append(name)
            for nbr, attrs in self._succ[node].items():
                if nbr.startswith(prefix):
                    edges.append((name, nbr[cut:], attrs["latency_s"]))
                elif nbr not in self._fabric_set:
                    return None
                elif name not in gateways:
                    gateways.append(name)
        key = (tuple(names), tuple(gateways), tuple(edges))
        known = self._template_by_signature.get(key)
        local = known.graph if known is not None else DiGraph()
        if known is None:
            local.add_nodes_from(names)
            local.add_edges_from((u, v, {"latency_s": latency}) for u, v, latency in edges)
        return key, local, tuple(gateways)

    # --- route pieces ----------------------------------------------------------------------
    def _compute(self, src: str, dst: str) -> tuple[Edge, ...]:
        a, b = self._parse(src), self._parse(dst)  # both found: server devices, so graph nodes
        if a is None or b is None:
            for node in (src, dst):
                if node not in self._nodes:
                    raise TrainsimError(f"no device {node!r} in topology {self.name!r}")
        if src == dst:
            return ()
        if a is not None and b is not None:
            route = self._same_host(a[0], a[1], b[1]) if a[0] == b[0] else self._hierarchical(a, b)
            if route is not None:
                return route
        return self._dijkstra(src, dst)

    def _dijkstra(self, src: str, dst: str) -> tuple[Edge, ...]:
        # networkx's bidirectional Dijkstra (its tie-breaking is what routes such graphs), on the
        # graph as it is: networkx's algorithms read simcore.digraph's dicts
        import networkx as nx

        try:
            nodes = nx.shortest_path(self.graph, src, dst, weight="latency_s")
        except nx.NetworkXNoPath as exc:
            raise TrainsimError(f"no route from {src!r} to {dst!r} in topology {self.name!r}") from exc
        return tuple(itertools.pairwise(nodes))

    def _hierarchical(self, a: tuple[int, str], b: tuple[int, str]) -> tuple[Edge, ...] | None:
        """The route between devices of two different servers (None: a server breaks the convention)."""
        (host_a, local_a), (host_b, local_b) = a, b
        templates = self._templates
        template_a = templates[host_a] if host_a in templates else self._template(host_a)
        if template_a is None:
            return None
        template_b = templates[host_b] if host_b in templates else self._template(host_b)
        if template_b is None:
            return None
        key = (id(template_a), local_a, id(template_b), local_b)
        ends = self._server_ends.get(key)
        if ends is None:
            ends = self._server_ends[key] = self._ends(template_a, local_a, template_b, local_b)
        gw_a, gw_b, out_path, in_path, gw_number = ends
        if gw_a is None or gw_b is None:
            raise TrainsimError(
                f"no route from h{host_a}/{local_a} to h{host_b}/{local_b} in topology "
                f"{self.name!r}: a server has no link into the fabric"
            )
        number_b = host_b * len(template_b.gateways) + gw_number
        fabric = self._fabric_path(self._host_names(host_a)[gw_a], self._host_names(host_b)[gw_b], number_b)
        if out_path is None or in_path is None or fabric is None:
            raise TrainsimError(
                f"no route from h{host_a}/{local_a} to h{host_b}/{local_b} in topology {self.name!r}"
            )
        return self._in_host(host_a, out_path) + fabric + self._in_host(host_b, in_path)

    def _ends(
        self, template_a: _HostTemplate, local_a: str, template_b: _HostTemplate, local_b: str
    ) -> _ServerEnds:
        """How a route between two servers' devices leaves the first and enters the second."""
        gw_a = self._nearest_gateway(template_a, local_a, outbound=True)
        gw_b = self._nearest_gateway(template_b, local_b, outbound=False)
        if gw_a is None or gw_b is None:
            return gw_a, gw_b, None, None, 0
        out_path = self._local_route(template_a, local_a, gw_a)
        in_path = self._local_route(template_b, gw_b, local_b)
        return gw_a, gw_b, out_path, in_path, template_b.gateways.index(gw_b)

    def _same_host(self, host: int, src: str, dst: str) -> tuple[Edge, ...] | None:
        """The path between two devices of one server (None if the server breaks the convention)."""
        template = self._templates[host] if host in self._templates else self._template(host)
        if template is None:
            return None
        local_route = self._local_route(template, src, dst)
        return None if local_route is None else self._in_host(host, local_route)

    def _local_route(self, template: _HostTemplate, src: str, dst: str) -> tuple[Edge, ...] | None:
        """The lowest-latency path inside a server build, as links in local names (cached)."""
        key = (id(template), src, dst)
        if key not in self._local_routes:
            paths = self._local_paths.get(key[:2])
            if paths is None:
                paths = self._local_paths[key[:2]] = _dijkstra_paths(template.graph._succ, src)
            nodes = paths.get(dst)
            self._local_routes[key] = None if nodes is None else tuple(itertools.pairwise(nodes))
        return self._local_routes[key]

    def _in_host(self, host: int, local_route: tuple[Edge, ...]) -> tuple[Edge, ...]:
        """``local_route`` inside server ``host``, in graph names (link tuples shared per host)."""
        links = self._host_links.get(host)
        if links is None:
            template = cast(_HostTemplate, self._templates[host])  # local routes come from it
            names = self._host_names(host)
            links = self._host_links[host] = {(u, v): (names[u], names[v]) for u, v in template.graph.edges()}
        return tuple([links[link] for link in local_route])

    def _host_names(self, host: int) -> dict[str, str]:
        """Local name -> the graph's own node name object (its hash already computed)."""
        names = self._names.get(host)
        if names is None:
            cut = len(f"h{host}/")
            names = self._names[host] = {n[cut:]: n for n in self._host_nodes.get(host, [])}
        return names

    def _nearest_gateway(self, template: _HostTemplate, local: str, outbound: bool) -> str | None:
        """Lowest latency to (or from) a gateway; ties: same rail number, then graph order."""
        key = (id(template), local, outbound)
        if key in self._gateway_cache:
            return self._gateway_cache[key]
        graph = template.graph
        dist = _dijkstra_paths(graph._succ if outbound else graph._pred, local, paths=False)
        rail = _rail(local)
        candidates = [
            (dist[g], _rail(g) != rail, order, g) for order, g in enumerate(template.gateways) if g in dist
        ]
        best = min(candidates)[3] if candidates else None
        self._gateway_cache[key] = best
        return best

    def _fabric(self) -> dict[str, list[tuple[str, float]]]:
        """The fabric switches' links among themselves: switch -> [(next switch, latency)]."""
        if self._fabric_adjacency is None:
            fabric = self._fabric_set
            self._fabric_adjacency = {
                node: [
                    (nbr, float(attrs["latency_s"]))
                    for nbr, attrs in self._succ[node].items()
                    if nbr in fabric
                ]
                for node in self._fabric_nodes
            }
        return self._fabric_adjacency

    def _fabric_path(self, gw_a: str, gw_b: str, number_b: int) -> tuple[Edge, ...] | None:
        """Gateway to gateway through fabric switches only, ties broken by the destination's number."""
        succ = self._succ
        best: tuple[float, int, list[str]] | None = None
        ups = [x for x in succ[gw_a] if x in self._fabric_set]
        downs = [y for y in succ[gw_b] if y in self._fabric_set and gw_b in succ[y]]
        for order, (x, y) in enumerate(itertools.product(ups, downs)):
            found = self._fabric_between(x, y, number_b)
            if found is not None:
                cost = succ[gw_a][x]["latency_s"] + found[0] + succ[y][gw_b]["latency_s"]
                if best is None or (cost, order) < best[:2]:
                    best = (cost, order, found[1])
        if best is None:
            return None
        nodes = best[2]
        return ((gw_a, nodes[0]), *itertools.pairwise(nodes), (nodes[-1], gw_b))

    def _fabric_between(self, x: str, y: str, choice: int) -> tuple[float, list[str]] | None:
        """(latency, switches) of a lowest-latency fabric path from switch ``x`` to switch ``y``.

        One or two hops are checked directly when no longer path can beat them (every extra hop
        costs at least the fabric's smallest link latency), which covers leaf-spine and
        rail-optimised fabrics without a Dijkstra per leaf; anything else runs Dijkstra from ``x``.
        Among equal-cost paths, ``choice`` picks one (destination modulo the number of ties).
        """
        if x == y:
            return 0.0, [x]
        succ, hop = self._succ, self._fabric_min_latency()
        direct = succ[x][y]["latency_s"] if y in succ[x] else None
        if direct is not None and direct <= 2 * hop:
            return direct, [x, y]
        if direct is None:
            via = [(latency + succ[z][y]["latency_s"], z) for z, latency in self._fabric()[x] if y in succ[z]]
            cost = min((c for c, _ in via), default=float("inf"))
            if cost <= 3 * hop:
                ties = [z for c, z in via if c == cost]
                return cost, [x, ties[choice % len(ties)], y]
        preds, dist = self._fabric_from(x)
        if y not in dist:
            return None
        nodes = [y]
        while nodes[-1] != x:
            options = preds[nodes[-1]]
            nodes.append(options[choice % len(options)])
            choice //= len(options)
        nodes.reverse()
        return dist[y], nodes

    def _fabric_min_latency(self) -> float:
        if self._min_hop_s is None:
            self._min_hop_s = min((lat for links in self._fabric().values() for _, lat in links), default=0.0)
        return self._min_hop_s

    def _fabric_from(self, switch: str) -> tuple[dict[str, list[str]], dict[str, float]]:
        """Dijkstra from ``switch`` over the fabric: (every shortest-path predecessor, distance)."""
        cached = self._fabric_preds.get(switch)
        if cached is None:
            cached = self._fabric_preds[switch] = _dijkstra_with_ties(self._fabric(), switch)
        return cached


def _dijkstra_paths(
    adjacency: dict[str, dict[str, dict[str, float]]], source: str, *, paths: bool = True
) -> dict[str, Any]:
    """Lowest-latency paths from ``source`` (node -> node list), or with ``paths=False`` their latencies.

    networkx's ``single_source_dijkstra_path`` / ``_path_length`` step for step (heap of (distance,
    push count, node); a node's path is the one through the predecessor of its last strict
    improvement), so ties resolve exactly as they did when routing ran on networkx; a server's
    graph has a few dozen links, so this is no place to need networkx's library.
    """
    dist: dict[str, float] = {}
    seen: dict[str, float] = {source: 0}  # an int 0, as networkx starts
    via: dict[str, str] = {}
    order = itertools.count()
    heap: list[tuple[float, int, str]] = [(0, next(order), source)]
    while heap:
        d, _, node = heapq.heappop(heap)
        if node in dist:
            continue
        dist[node] = d
        for nbr, attrs in adjacency[node].items():
            candidate = d + attrs.get("latency_s", 1)
            if nbr in dist:
                continue
            if nbr not in seen or candidate < seen[nbr]:
                seen[nbr] = candidate
                heapq.heappush(heap, (candidate, next(order), nbr))
                via[nbr] = node
    if not paths:
        return dist
    found: dict[str, list[str]] = {source: [source]}
    for node in itertools.islice(dist, 1, None):
        found[node] = found[via[node]] + [node]
    return found


def _dijkstra_with_ties(
    adjacency: dict[str, list[tuple[str, float]]], source: str
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Shortest distances from ``source`` and, per node, all predecessors on a shortest path.

    Plain dicts and a heap: networkx's version costs several times more per edge, and a 512-server
    fabric needs one run per leaf switch.
    """
    dist: dict[str, float] = {}
    best = {source: 0.0}
    preds: dict[str, list[str]] = {source: []}
    order = itertools.count()
    heap = [(0.0, next(order), source)]
    while heap:
        d, _, node = heapq.heappop(heap)
        if node in dist:
            continue
        dist[node] = d
        for nbr, latency in adjacency.get(node, ()):
            candidate = d + latency
            known = best.get(nbr)
            if known is None or candidate < known:
                best[nbr] = candidate
                preds[nbr] = [node]
                heapq.heappush(heap, (candidate, next(order), nbr))
            elif candidate == known and nbr not in dist:
                preds[nbr].append(node)
    return preds, dist


def _split(node: str) -> tuple[int, str] | None:
    """``"h12/gpu3"`` -> (12, "gpu3"); None for fabric nodes (no ``h{number}/`` prefix)."""
    head, sep, local = node.partition("/")
    if sep and head[:1] == "h" and head[1:].isdigit() and local:
        return int(head[1:]), local
    return None
