"""Per-link bookkeeping of a :class:`~simcore.net.network.Network`: link numbers, counters, summaries.

Links are numbered in order of first use per topology (:class:`LinkIndex`, shared by every network
on that topology); each network keeps its own counters per link number as numpy arrays
(:class:`LinkTable`): bytes delivered, busy time (at least one flow transmitting), peak concurrent
flows and flows that crossed. :class:`LinkStatsView` reads them as ``{(u, v): LinkStats}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from simcore.digraph import DiGraph
from simcore.errors import TrainsimError
from simcore.net.routing import Edge
from simcore.topology import Topology, effective_bandwidth

# numpy: imported inside the functions that use it, so --help does not load it
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from simcore.net.network import Flow

__all__ = ["LinkClassSummary", "LinkIndex", "LinkStats", "LinkStatsView", "LinkTable", "link_name"]

_NO_LINKS: Mapping[str, dict[str, Any]] = MappingProxyType({})  # what a node without out-links has
_COUNTERS = (("bytes_done", "float64"), ("busy_s", "float64"), ("max_flows", "int64"), ("flows", "int64"))


@dataclass(frozen=True, slots=True)
class LinkStats:
    """What one directed link carried: bytes, time with at least one flow on it, peak flow count."""

    bytes: float = 0.0
    busy_s: float = 0.0
    max_flows: int = 0
    flows: int = 0  # flows that crossed the link in total


def link_name(edge: Edge) -> str:
    """How a link is named in reports: ``"u->v"``."""
    return f"{edge[0]}->{edge[1]}"


@dataclass(frozen=True, slots=True)
class LinkClassSummary:
    """The links of one class (``kind``) that carried traffic, summarised."""

    kind: str
    links: int
    bytes: float
    max_utilisation: float
    mean_utilisation: float
    max_flows: int
    busiest_link: str


class LinkIndex:
    """The directed links of one topology, numbered in order of first use, with their bandwidths.

    Shared by every :class:`Network` on the same topology (like its routes), together with each
    route's latency and link numbers, so a collective simulated many times routes once.
    """

    def __init__(self, graph: DiGraph) -> None:
        import numpy as np

        self.graph = graph
        self._succ: dict[str, dict[str, dict[str, Any]]] = graph._succ  # raw dicts: views are slow
        self.index: dict[Edge, int] = {}
        self.edges: list[Edge] = []
        self._bandwidths: list[float] = []
        self._latencies: list[float] = []  # as the graph stores them, summed per route
        self._capacity = np.zeros(0)
        self._paths: dict[tuple[Edge, ...], tuple[float, NDArray[np.intp]]] = {}

    @classmethod
    def for_topology(cls, topology: Topology) -> LinkIndex:
        return topology.derived("link_index", lambda: cls(topology.graph))

    def __len__(self) -> int:
        return len(self.edges)

    @property
    def capacity(self) -> NDArray[np.float64]:
        """Usable bandwidth (B/s) per link number: datasheet rate x efficiency."""
        import numpy as np

        if len(self._capacity) != len(self.edges):
            self._capacity = np.array(self._bandwidths, dtype=np.float64)
        return self._capacity

    def path(self, route: tuple[Edge, ...]) -> tuple[float, NDArray[np.intp]]:
        """(latency_s, link numbers) of a route; a link the topology lacks is a TrainsimError.

        A link is numbered on first use. This runs once per distinct route (tens of thousands on a
        4096-GPU fabric), hence the loop written out rather than a method call per new link.
        """
        import numpy as np

        known = self._paths.get(route)
        if known is None:
            index, edges, latencies, succ = self.index, self.edges, self._latencies, self._succ
            numbers = []
            for edge in route:
                number = index.get(edge)
                if number is None:
                    attrs = succ.get(edge[0], _NO_LINKS).get(edge[1])
                    if attrs is None:
                        raise TrainsimError(
                            f"route uses link {link_name(edge)}, which is not in the topology"
                        )
                    number = index[edge] = len(edges)
                    edges.append(edge)
                    self._bandwidths.append(effective_bandwidth(attrs))
                    latencies.append(attrs["latency_s"])
                numbers.append(number)
            latency = float(sum([latencies[n] for n in numbers]))  # in route order, as graph values
            known = self._paths[route] = (latency, np.array(numbers, dtype=np.intp))
        return known

    def kind(self, i: int) -> str:
        u, v = self.edges[i]
        return str(self._succ[u][v]["kind"])


class LinkTable:
    """One network's counters per link number of the shared :class:`LinkIndex`, as arrays."""

    def __init__(self, shared: LinkIndex) -> None:
        import numpy as np

        self.shared = shared
        self.index = shared.index
        self.edges = shared.edges
        self._arrays: dict[str, NDArray[Any]] = {
            name: np.zeros(len(shared), dtype) for name, dtype in _COUNTERS
        }

    def __len__(self) -> int:
        return len(self.shared)

    def _column(self, name: str) -> NDArray[Any]:
        import numpy as np

        column = self._arrays[name]
        if len(column) < len(self.shared):
            column = self._arrays[name] = np.concatenate(
                [column, np.zeros(len(self.shared) - len(column), column.dtype)]
            )
        return column

    capacity = property(lambda self: self.shared.capacity)
    bytes_done = property(lambda self: self._column("bytes_done"))
    busy_s = property(lambda self: self._column("busy_s"))
    max_flows = property(lambda self: self._column("max_flows"))
    flows = property(lambda self: self._column("flows"))

    def count_new_flows(self, flows: Sequence[Flow]) -> None:
        import numpy as np

        if len(flows) == 1 and flows[0].simple and flows[0].link_ids is not None:
            self.flows[flows[0].link_ids] += 1  # one flow (the common case): a route lists a link once
        elif flows:
            ids = np.concatenate([f.link_ids for f in flows if f.link_ids is not None])
            self.flows[:] += np.bincount(ids, minlength=len(self))

    def note_concurrency(self, links: NDArray[np.intp], counts: NDArray[np.intp]) -> None:
        import numpy as np

        self.max_flows[links] = np.maximum(self.max_flows[links], counts)

    def add_bytes(self, links: NDArray[np.intp], sizes: NDArray[np.float64]) -> None:
        import numpy as np

        self.bytes_done[:] += np.bincount(links, weights=sizes, minlength=len(self))

    def busiest(
        self, bytes_per_link: NDArray[np.float64], among: NDArray[np.intp] | None = None
    ) -> Edge | None:
        """Most bytes relative to bandwidth; ties go to the first link name in sort order."""
        import numpy as np

        among = np.flatnonzero(self.flows) if among is None else among
        if len(among) == 0:
            return None
        fraction = bytes_per_link[among] / self.capacity[among]
        top = among[fraction == fraction.max()]
        return min(self.edges[i] for i in top.tolist())

    def summary(self, bytes_per_link: NDArray[np.float64], span_s: float) -> list[LinkClassSummary]:
        import numpy as np

        used = np.flatnonzero(self.flows)
        kinds = np.array([self.shared.kind(i) for i in used.tolist()])
        rows = []
        for kind in sorted(set(kinds.tolist())):
            members = used[kinds == kind]
            util = (
                bytes_per_link[members] / (self.capacity[members] * span_s)
                if span_s > 0
                else np.zeros(len(members))
            )
            busiest = self.busiest(bytes_per_link, members)
            rows.append(
                LinkClassSummary(
                    kind,
                    len(members),
                    float(bytes_per_link[members].sum()),
                    float(util.max()),
                    float(util.mean()),
                    int(self.max_flows[members].max()),
                    link_name(busiest) if busiest else "",
                )
            )
        return rows


class LinkStatsView(Mapping[Edge, LinkStats]):
    """A snapshot of per-link counters, keyed by directed edge (links that carried a flow)."""

    def __init__(self, links: LinkTable, in_flight: NDArray[np.float64]) -> None:
        self._links = links
        self._bytes = links.bytes_done + in_flight

    def __getitem__(self, edge: Edge) -> LinkStats:
        i = self._links.index.get(edge)
        if i is None or self._links.flows[i] == 0:
            raise KeyError(edge)
        t = self._links
        return LinkStats(float(self._bytes[i]), float(t.busy_s[i]), int(t.max_flows[i]), int(t.flows[i]))

    def __iter__(self) -> Iterator[Edge]:
        t = self._links
        return (e for i, e in enumerate(t.edges) if t.flows[i] > 0)

    def __len__(self) -> int:
        import numpy as np

        return int(np.count_nonzero(self._links.flows))

    @property
    def bytes_per_link(self) -> NDArray[np.float64]:
        return self._bytes
