"""Draw a topology to PNG: one column block per host, fabric switches on top (matplotlib, lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simcore.output import save_figure
from simcore.topology import Topology

__all__ = ["draw_png", "layout"]

_ROW = {"gpu": 0.0, "switch": 1.0, "pcie": 2.0, "cpu": 3.0, "nic": 4.0}
_HOST_WIDTH = 10.0
_COLOURS = {
    "nvlink": "tab:green",
    "nvswitch": "tab:green",
    "pcie": "tab:blue",
    "smp": "tab:purple",
    "memory": "tab:gray",
    "ib": "tab:red",
    "ethernet": "tab:orange",
    "loopback": "tab:brown",
}
_NODE_COLOURS = {"gpu": "#76b900", "cpu": "#5b8def", "nic": "#e8743b", "switch": "#999999", "pcie": "#c7c7c7"}


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    """Deterministic positions: hosts side by side, device kinds in rows, fabric above."""
    by_row: dict[tuple[int, str], list[str]] = {}
    fabric: list[str] = []
    for name, attrs in topo.graph.nodes(data=True):
        host = int(attrs["host"])
        if host < 0:
            fabric.append(name)
        else:
            by_row.setdefault((host, str(attrs["kind"])), []).append(name)
    pos: dict[str, tuple[float, float]] = {}
    for (host, kind), names in by_row.items():
        for slot, name in enumerate(names):  # spread each row over the host's block
            pos[name] = (
                host * _HOST_WIDTH + (slot + 0.5) * (_HOST_WIDTH - 1.0) / len(names),
                _ROW.get(kind, 1.5),
            )
    width = max((x for x, _ in pos.values()), default=0.0)
    spines = [n for n in fabric if n.startswith("spine")]
    leaves = [n for n in fabric if n not in spines]
    for row, names in ((5.5, leaves), (7.0, spines)):
        for i, name in enumerate(names):
            pos[name] = (width * (i + 0.5) / max(len(names), 1), row)
    return pos


def _networkx_graph(topo: Topology) -> Any:
    """The topology's graph as a ``networkx.DiGraph`` (a hand-built one is one already)."""
    to_networkx = getattr(topo.graph, "to_networkx", None)
    return to_networkx() if to_networkx is not None else topo.graph


def draw_png(topo: Topology, path: Path | str) -> None:
    """Write the graph picture to ``path`` (edges coloured by link kind)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    pos = layout(topo)
    hosts = max(len(topo.hosts), 1)
    fig, ax = plt.subplots(figsize=(min(4 + 5 * hosts, 40), 7))
    graph = _networkx_graph(topo)  # networkx's drawing needs its own graph type
    undirected = graph.to_undirected(as_view=True)
    for kind, colour in _COLOURS.items():
        edges = [(u, v) for u, v, a in undirected.edges(data=True) if a["kind"] == kind]
        if edges:
            nx.draw_networkx_edges(
                undirected, pos, edgelist=edges, edge_color=colour, ax=ax, label=kind, width=1.5
            )
    colours = [_NODE_COLOURS.get(str(a["kind"]), "#cccccc") for _, a in topo.graph.nodes(data=True)]
    nx.draw_networkx_nodes(graph, pos, node_color=colours, node_size=260, ax=ax)
    labels = {n: n.split("/")[-1] for n in topo.graph}
    nx.draw_networkx_labels(graph, pos, labels=labels, font_size=6, ax=ax)
    ax.set_title(f"{topo.name}: {topo.world_size} ranks on {hosts} host(s)")
    ax.legend(loc="upper left", fontsize=7)
    ax.axis("off")
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
