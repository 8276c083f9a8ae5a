"""The cluster graph's storage: a directed graph of plain dicts, laid out as networkx lays out its own.

Why not ``networkx.DiGraph``: importing networkx loads its whole algorithm library (about 0.1 s of
CPU, a tenth of the default what-if), and building, validating and routing a cluster needs no
algorithm of it. So the topology builders make a :class:`DiGraph`; networkx is imported only where
one of its graph algorithms runs (a maximum flow in ``topologies.summary``, a drawing, the routing
fallback for graphs that break the naming convention).

The layout is networkx's own: ``_node`` (node -> attribute dict), ``_succ`` / ``_pred`` (node ->
neighbour -> the one attribute dict an edge's two views share), kept in insertion order, so every
iteration visits nodes and edges in the order ``networkx.DiGraph`` would. Code written against a
``networkx.DiGraph`` (``graph.nodes[n]``, ``graph.edges(data=True)``, ``graph._succ``, ...) reads a
:class:`DiGraph` alike, and networkx's algorithms accept one as it is (they read the same dicts and
ask :meth:`DiGraph.is_directed`), so a caller may hand either to :class:`simcore.topology.Topology`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any

__all__ = ["DiGraph", "EdgeView", "NodeView"]

Attrs = dict[str, Any]


class _Rows:
    """A re-iterable, lazily computed sequence of rows (what ``nodes(data=True)`` and ``edges(...)``
    return: iterated as often as wanted, like networkx's data views)."""

    __slots__ = ("_make",)

    def __init__(self, make: Any) -> None:
        self._make = make

    def __iter__(self) -> Iterator[Any]:
        return iter(self._make())

    def __len__(self) -> int:
        return sum(1 for _ in self._make())


class _Nodes:
    """Iteration, length and membership over the nodes in ``_node`` (a graph and its node view)."""

    __slots__ = ()
    _node: dict[Any, Attrs]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, node: object) -> bool:
        try:
            return node in self._node
        except TypeError:
            return False


class NodeView(_Nodes):
    """``graph.nodes``: iterate the nodes, ``nodes[n]`` for one's attributes, ``nodes(data=True)``
    for (node, attributes) pairs (``data="key"``: (node, that attribute or ``default``))."""

    __slots__ = ("_node",)

    def __init__(self, node: dict[Any, Attrs]) -> None:
        self._node = node

    def __getitem__(self, node: Hashable) -> Attrs:
        return self._node[node]

    def items(self) -> Iterable[tuple[Any, Attrs]]:
        return self._node.items()

    def __call__(self, data: bool | str = False, default: Any = None) -> Iterable[Any]:
        node = self._node
        if data is False:
            return _Rows(lambda: node)
        if data is True:
            return _Rows(node.items)
        return _Rows(lambda: ((n, attrs.get(data, default)) for n, attrs in node.items()))


class EdgeView:
    """``graph.edges`` (and ``out_edges``): iterate (u, v), ``edges[u, v]`` for one's attributes,
    ``edges(data=True)`` for (u, v, attributes), ``edges(node)`` for the links out of ``node``."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict[Any, dict[Any, Attrs]]) -> None:
        self._succ = succ

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def __contains__(self, edge: object) -> bool:
        if not isinstance(edge, tuple) or len(edge) != 2:
            return False
        nbrs = self._succ.get(edge[0])
        return nbrs is not None and edge[1] in nbrs

    def __getitem__(self, edge: tuple[Hashable, Hashable]) -> Attrs:
        u, v = edge
        return self._succ[u][v]

    def __call__(
        self,
        nbunch: Hashable | Iterable[Hashable] | None = None,
        data: bool | str = False,
        default: Any = None,
    ) -> Iterable[Any]:
        succ = self._succ
        sources: Iterable[Any] = succ
        if nbunch is not None:
            try:
                single = nbunch in succ
            except TypeError:  # a list of nodes
                single = False
            sources = [nbunch] if single else [n for n in nbunch if n in succ]  # type: ignore[union-attr]
        if data is False:
            return _Rows(lambda: ((u, v) for u in sources for v in succ[u]))
        if data is True:
            return _Rows(lambda: ((u, v, d) for u in sources for v, d in succ[u].items()))
        return _Rows(lambda: ((u, v, d.get(data, default)) for u in sources for v, d in succ[u].items()))


class DiGraph(_Nodes):
    """A directed graph with attributes on nodes and edges (the subset of ``networkx.DiGraph`` that
    trainsim uses, on the same dicts; see the module docstring)."""

    def __init__(self) -> None:
        self.graph: Attrs = {}  # graph-level attributes, as networkx's ``G.graph``
        self._node: dict[Any, Attrs] = {}
        self._succ: dict[Any, dict[Any, Attrs]] = {}
        self._pred: dict[Any, dict[Any, Attrs]] = {}
        self._adj = self._succ  # networkx's algorithms read a directed graph's successors here

    # --- what networkx's algorithms ask ------------------------------------------------------
    def is_directed(self) -> bool:
        return True

    def is_multigraph(self) -> bool:
        return False

    def __getstate__(self) -> dict[str, Any]:
        return {"graph": self.graph, "_node": self._node, "_succ": self._succ, "_pred": self._pred}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._adj = self._succ

    # --- reading -----------------------------------------------------------------------------
    def __getitem__(self, node: Hashable) -> dict[Any, Attrs]:
        return self._succ[node]

    @property
    def nodes(self) -> NodeView:
        return NodeView(self._node)

    @property
    def edges(self) -> EdgeView:
        return EdgeView(self._succ)

    out_edges = edges

    @property
    def succ(self) -> dict[Any, dict[Any, Attrs]]:
        return self._succ

    adj = succ

    @property
    def pred(self) -> dict[Any, dict[Any, Attrs]]:
        return self._pred

    def successors(self, node: Hashable) -> Iterator[Any]:
        return iter(self._succ[node])

    neighbors = successors

    def predecessors(self, node: Hashable) -> Iterator[Any]:
        return iter(self._pred[node])

    def has_node(self, node: Hashable) -> bool:
        return node in self

    def has_edge(self, u: Hashable, v: Hashable) -> bool:
        nbrs = self._succ.get(u)
        return nbrs is not None and v in nbrs

    def number_of_nodes(self) -> int:
        return len(self._node)

    def number_of_edges(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def degree(self, node: Hashable) -> int:
        """Links into and out of ``node`` (a self-loop counts twice, as in networkx)."""
        return len(self._succ[node]) + len(self._pred[node])

    # --- building ----------------------------------------------------------------------------
    def add_node(self, node: Hashable, **attrs: Any) -> None:
        if node not in self._node:
            self._succ[node] = {}
            self._pred[node] = {}
            self._node[node] = {}
        self._node[node].update(attrs)

    def add_nodes_from(self, nodes: Iterable[Any], **attrs: Any) -> None:
        """Nodes, or (node, attribute dict) pairs, as ``networkx.DiGraph.add_nodes_from`` takes them."""
        for item in nodes:
            try:
                node, own = item, attrs
                new = node not in self._node
            except TypeError:  # (node, attrs): unhashable for the dict inside
                node, extra = item
                own = {**attrs, **extra}
                new = node not in self._node
            if new:
                self._succ[node] = {}
                self._pred[node] = {}
                self._node[node] = {}
            self._node[node].update(own)

    def add_edge(self, u: Hashable, v: Hashable, **attrs: Any) -> None:
        self.add_edges_from([(u, v, attrs)])

    def add_edges_from(self, edges: Iterable[tuple[Any, ...]], **attrs: Any) -> None:
        """(u, v) or (u, v, attribute dict) tuples; missing end nodes are added without attributes."""
        succ, pred, node_attrs = self._succ, self._pred, self._node
        for edge in edges:
            if len(edge) == 3:
                u, v, own = edge
            else:
                (u, v), own = edge, {}
            for end in (u, v):
                if end not in succ:
                    succ[end] = {}
                    pred[end] = {}
                    node_attrs[end] = {}
            data = succ[u].get(v, {})
            data.update(attrs)
            data.update(own)
            succ[u][v] = data
            pred[v][u] = data

    def remove_edges_from(self, edges: Iterable[tuple[Any, ...]]) -> None:
        for edge in edges:
            u, v = edge[:2]
            if u in self._succ and v in self._succ[u]:
                del self._succ[u][v]
                del self._pred[v][u]

    def remove_nodes_from(self, nodes: Iterable[Hashable]) -> None:
        for node in list(nodes):
            if node not in self._node:
                continue
            del self._node[node]
            for v in self._succ.pop(node):
                del self._pred[v][node]
            for u in self._pred.pop(node):
                del self._succ[u][node]

    def copy(self) -> DiGraph:
        """A new graph with copies of every attribute dict (values shared, as networkx copies)."""
        new = DiGraph()
        new.graph.update(self.graph)
        new.add_nodes_from((n, dict(d)) for n, d in self._node.items())
        new.add_edges_from((u, v, dict(d)) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return new

    def reverse(self, copy: bool = True) -> DiGraph:
        """Every edge turned round (a new graph; ``copy`` is accepted for networkx's signature)."""
        new = DiGraph()
        new.graph.update(self.graph)
        new.add_nodes_from((n, dict(d)) for n, d in self._node.items())
        new.add_edges_from((v, u, dict(d)) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return new

    def to_networkx(self) -> Any:
        """The same graph as a ``networkx.DiGraph`` (same order; attribute dicts copied), for what
        needs networkx's own graph type (drawing)."""
        import networkx as nx  # here, not at the top: only a caller that draws pays for networkx

        graph = nx.DiGraph()
        graph.graph.update(self.graph)
        graph.add_nodes_from((n, dict(d)) for n, d in self._node.items())
        graph.add_edges_from((u, v, dict(d)) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return graph
