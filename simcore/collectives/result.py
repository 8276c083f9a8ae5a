"""What a priced collective reports: its time, closed form, algorithm and protocol, bottleneck link.

The bottleneck is data (:class:`LinkRef`: the edge, its kind, datasheet and usable rates); reports
format it with :func:`describe_link` and nothing reads a formatted link back.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.topology import Topology, effective_bandwidth

__all__ = ["CollectiveResult", "LinkRef", "describe_link", "link_ref"]


@dataclass(frozen=True, slots=True)
class LinkRef:
    """One directed link: ``src -> dst``, its kind, datasheet rate and usable rate (B/s)."""

    src: str
    dst: str
    kind: str
    bandwidth_Bps: float
    usable_Bps: float

    @property
    def edge(self) -> tuple[str, str]:
        return (self.src, self.dst)


def link_ref(topology: Topology, edge: tuple[str, str] | None) -> LinkRef | None:
    """The link ``edge`` of ``topology`` as data (None for None)."""
    if edge is None:
        return None
    attrs = topology.graph.edges[edge]
    return LinkRef(
        edge[0], edge[1], str(attrs["kind"]), float(attrs["bandwidth_Bps"]), effective_bandwidth(attrs)
    )


def describe_link(link: LinkRef | None) -> str:
    """``"h0/gpu0->h0/nvswitch (nvswitch, 240.0 of 300.0 GB/s)"``; ``"none"`` when nothing moved."""
    if link is None:
        return "none"
    usable, rate = link.usable_Bps / 1e9, link.bandwidth_Bps / 1e9
    rates = f"{rate:.1f} GB/s" if abs(usable - rate) < 1e-9 * rate else f"{usable:.1f} of {rate:.1f} GB/s"
    return f"{link.src}->{link.dst} ({link.kind}, {rates})"


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One collective's simulated duration, its closed form, and what limited it.

    ``protocol`` is NCCL's (``LL``, ``LL128``, ``Simple``; ``""`` for a calibrated result);
    ``events`` counts the flows and timers the run put into the simulation (0 when calibrated).
    """

    op: str
    algorithm: str
    size_bytes: float
    group: tuple[int, ...]
    time_s: float
    closed_form_s: float
    bottleneck: LinkRef | None
    events: int
    protocol: str = ""
