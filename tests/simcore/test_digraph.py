"""simcore.digraph.DiGraph reads like networkx.DiGraph, and routing's Dijkstra ties as networkx's does.

The cluster builders make a DiGraph instead of a networkx graph (so a what-if does not import
networkx); every reader was written against networkx, so each property below builds the same
graph both ways and compares what the two answer.
"""

from __future__ import annotations

import pickle

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.digraph import DiGraph
from simcore.net.routing import _dijkstra_paths
from simcore.topology import Topology, TopologyError
from tests.fresh_imports import imported_by

NAMES = [f"n{i}" for i in range(7)]

# a graph as a list of (u, v, latency) links; latencies from a small set so ties are common
links = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES), st.sampled_from([0.5, 1.0, 1.5, 2.0])),
    max_size=25,
)


def _both(edges: list[tuple[str, str, float]]) -> tuple[DiGraph, nx.DiGraph]:
    ours, theirs = DiGraph(), nx.DiGraph()
    for graph in (ours, theirs):
        graph.add_nodes_from([("n0", {"kind": "gpu"}), "n1"])
        graph.add_edges_from((u, v, {"latency_s": lat, "kind": "ib"}) for u, v, lat in edges)
    return ours, theirs


@settings(max_examples=60, deadline=None)
@given(links)
def test_nodes_edges_and_their_order_are_networkx_s(edges) -> None:
    ours, theirs = _both(edges)
    assert list(ours) == list(theirs) and list(ours.nodes) == list(theirs.nodes)
    assert list(ours.nodes(data=True)) == list(theirs.nodes(data=True))
    assert list(ours.nodes(data="kind")) == list(theirs.nodes(data="kind"))
    assert list(ours.edges) == list(theirs.edges)
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True))
    assert list(ours.edges("n0", data=True)) == list(theirs.edges("n0", data=True))
    assert ours.number_of_edges() == theirs.number_of_edges() == len(ours.edges)
    for n in theirs:
        assert list(ours.successors(n)) == list(theirs.successors(n))
        assert list(ours.predecessors(n)) == list(theirs.predecessors(n))
        assert ours.degree(n) == theirs.degree(n)
    for u, v in theirs.edges:
        assert ours.has_edge(u, v) and (u, v) in ours.edges and ours.edges[u, v] == theirs.edges[u, v]
        assert ours.succ[u][v] is ours.pred[v][u]  # one dict per edge, as networkx shares it


@settings(max_examples=60, deadline=None)
@given(links, st.sampled_from(NAMES[:3]))
def test_routing_dijkstra_is_networkx_s_including_ties(edges, source) -> None:
    ours, theirs = _both(edges)
    if source not in theirs:
        return
    assert _dijkstra_paths(ours._succ, source) == nx.single_source_dijkstra_path(
        theirs, source, weight="latency_s"
    )
    assert _dijkstra_paths(ours._pred, source, paths=False) == nx.single_source_dijkstra_path_length(
        theirs.reverse(copy=False), source, weight="latency_s"
    )


def test_a_tie_goes_to_the_first_path_found() -> None:
    # a -> b -> d and a -> c -> d both cost 2: networkx (and so routing) keeps the one through b,
    # the first neighbour of a; a rule that took the last improvement would go through c
    graph = DiGraph()
    graph.add_edges_from(
        [("a", "b", {"latency_s": 1.0}), ("a", "c", {"latency_s": 1.0}),
         ("b", "d", {"latency_s": 1.0}), ("c", "d", {"latency_s": 1.0})]
    )  # fmt: skip
    assert _dijkstra_paths(graph._succ, "a")["d"] == ["a", "b", "d"]
    assert _dijkstra_paths(graph._succ, "a", paths=False) == {"a": 0, "b": 1.0, "c": 1.0, "d": 2.0}


@settings(max_examples=30, deadline=None)
@given(links, st.lists(st.sampled_from(NAMES), max_size=3))
def test_copy_reverse_and_removal_match_networkx(edges, dropped) -> None:
    ours, theirs = _both(edges)
    assert list(ours.reverse().edges(data=True)) == list(theirs.reverse(copy=True).edges(data=True))
    mine, other = ours.copy(), theirs.copy()
    mine.remove_edges_from(edges[:2])
    other.remove_edges_from(edges[:2])
    mine.remove_nodes_from(dropped)
    other.remove_nodes_from(dropped)
    assert list(mine.nodes(data=True)) == list(other.nodes(data=True))
    assert list(mine.edges(data=True)) == list(other.edges(data=True))
    assert list(ours.edges) == list(theirs.edges)  # the copies changed, not the originals


def test_networkx_algorithms_accept_one_and_it_pickles() -> None:
    ours, theirs = _both([("n0", "n1", 1.0), ("n1", "n0", 1.0), ("n1", "n2", 2.0), ("n2", "n1", 2.0)])
    assert nx.is_strongly_connected(ours) == nx.is_strongly_connected(theirs) is True
    assert nx.shortest_path(ours, "n0", "n2", weight="latency_s") == ["n0", "n1", "n2"]
    back = pickle.loads(pickle.dumps(ours))
    assert list(back.edges(data=True)) == list(ours.edges(data=True)) and back._adj is back._succ
    assert list(ours.to_networkx().edges(data=True)) == list(theirs.edges(data=True))


def test_validation_finds_a_disconnected_rank() -> None:
    graph = DiGraph()
    graph.add_nodes_from([(n, {"kind": "gpu", "host": 0}) for n in ("h0/gpu0", "h0/gpu1", "h0/gpu2")])
    link = {"bandwidth_Bps": 1e9, "latency_s": 1e-6, "kind": "nvlink"}
    graph.add_edges_from([("h0/gpu0", "h0/gpu1", link), ("h0/gpu1", "h0/gpu0", link)])
    Topology("pair", graph, ["h0/gpu0", "h0/gpu1"])  # connected: accepted
    with pytest.raises(TopologyError, match="disconnected: 'h0/gpu2'"):
        Topology("three", graph, ["h0/gpu0", "h0/gpu1", "h0/gpu2"])


def test_building_and_routing_a_preset_imports_no_networkx() -> None:
    code = (
        "from topologies import load_cluster\n"
        "from simcore.net.routing import Router\n"
        "topo = load_cluster('dgx-a100', gpus=16)\n"
        "Router.for_topology(topo).route(topo.ranks[0], topo.ranks[15])\n"
    )
    assert imported_by(code, ["networkx"]) == []
