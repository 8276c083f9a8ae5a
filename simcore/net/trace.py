"""Timelines as Chrome-trace JSON, the format Perfetto (ui.perfetto.dev) and chrome://tracing open.

A trace is ``{"traceEvents": [...], "displayTimeUnit": "ns"}`` with times in microseconds:
``ph: "X"`` complete slices (``ts``, ``dur``), ``ph: "M"`` metadata naming processes and threads,
``ph: "C"`` counters. Here a *track* becomes a process (``pid``) and a *lane* inside it a thread
(``tid``). Perfetto cannot show slices that partly overlap on one thread, so slices recorded on the
same lane that overlap in time are spread over extra threads ``"lane"``, ``"lane #2"``, ... : each
slice goes to the first of them that is free at its start (greedy interval partitioning, which
uses as few threads as the peak overlap). Times are rounded to whole nanoseconds first, so a slice
that ends exactly when the next begins never overlaps it.

:func:`record_network` puts every completed flow of a :class:`~simcore.net.network.Network` on the
links it crossed (one track per link class, one lane per link) and the busiest links' utilisation
as counters.
"""

from __future__ import annotations

import gzip as gzip_module
import heapq
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcore.errors import TrainsimError
from simcore.net.network import link_name
from simcore.output import write_bytes_atomic
from simcore.topology import effective_bandwidth

if TYPE_CHECKING:
    from simcore.net.network import Network

__all__ = ["TraceRecorder", "record_network"]


@dataclass(frozen=True, slots=True)
class _Slice:
    track: str
    lane: str
    name: str
    start_ns: int
    end_ns: int
    seq: int
    args: Mapping[str, Any] | None


@dataclass(slots=True)
class TraceRecorder:
    """Collects slices and counters, then writes one Chrome-trace JSON file."""

    _slices: list[_Slice] = field(default_factory=list)
    _counters: list[tuple[str, str, int, dict[str, float]]] = field(default_factory=list)
    _tracks: dict[str, int] = field(default_factory=dict)

    def slice(
        self,
        track: str,
        lane: str,
        name: str,
        start_s: float,
        end_s: float,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Something that happened on ``lane`` of ``track`` from ``start_s`` to ``end_s``."""
        start_ns, end_ns = _ns(start_s), _ns(end_s)
        if end_ns < start_ns:
            raise TrainsimError(
                f"trace slice {name!r} on {track}/{lane} ends ({end_s} s) before it starts ({start_s} s)"
            )
        self._pid(track)
        self._slices.append(_Slice(track, lane, name, start_ns, end_ns, len(self._slices), args))

    def counter(self, track: str, name: str, time_s: float, values: Mapping[str, float]) -> None:
        """Counter ``name`` of ``track`` takes ``values`` (series name -> number) from ``time_s`` on."""
        self._pid(track)
        self._counters.append((track, name, _ns(time_s), {k: float(v) for k, v in values.items()}))

    def _pid(self, track: str) -> int:
        return self._tracks.setdefault(track, len(self._tracks) + 1)

    def events(self) -> list[dict[str, Any]]:
        """All trace events: metadata first, then slices with their lanes assigned, then counters."""
        meta: list[dict[str, Any]] = []
        for track, pid in self._tracks.items():
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": track}})
            meta.append(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
            )
        body: list[dict[str, Any]] = []
        threads: dict[tuple[str, str, int], int] = {}
        for s, sublane in _assign_sublanes(self._slices):
            pid = self._tracks[s.track]
            key = (s.track, s.lane, sublane)
            tid = threads.get(key)
            if tid is None:
                tid = threads[key] = len(threads) + 1
                label = s.lane if sublane == 0 else f"{s.lane} #{sublane + 1}"
                meta.append(
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}}
                )
                meta.append(
                    {
                        "ph": "M",
                        "name": "thread_sort_index",
                        "pid": pid,
                        "tid": tid,
                        "args": {"sort_index": tid},
                    }
                )
            event: dict[str, Any] = {
                "ph": "X",
                "name": s.name,
                "cat": s.track,
                "pid": pid,
                "tid": tid,
                "ts": s.start_ns / 1000,
                "dur": (s.end_ns - s.start_ns) / 1000,
            }
            if s.args:
                event["args"] = dict(s.args)
            body.append(event)
        for track, name, time_ns, values in self._counters:
            body.append(
                {
                    "ph": "C",
                    "name": name,
                    "pid": self._tracks[track],
                    "tid": 0,
                    "ts": time_ns / 1000,
                    "args": values,
                }
            )
        return meta + body

    def to_json(self) -> dict[str, Any]:
        return {"traceEvents": self.events(), "displayTimeUnit": "ns"}

    def write(self, path: str | Path, gzip: bool = False) -> Path:
        """Write the trace (gzip-compressed if asked, as Perfetto reads ``.json.gz`` directly)."""
        out = Path(path)
        text = json.dumps(self.to_json(), separators=(",", ":"))
        data = gzip_module.compress(text.encode(), mtime=0) if gzip else text.encode()
        return write_bytes_atomic(out, data)


def _ns(time_s: float) -> int:
    return round(time_s * 1e9)


def _assign_sublanes(slices: list[_Slice]) -> list[tuple[_Slice, int]]:
    """Each slice with the first sub-lane of its (track, lane) that is free at its start."""
    by_lane: dict[tuple[str, str], list[_Slice]] = {}
    for s in slices:
        by_lane.setdefault((s.track, s.lane), []).append(s)
    placed: list[tuple[_Slice, int]] = []
    for group in by_lane.values():
        busy: list[tuple[int, int]] = []  # (end_ns, sublane) of slices still running
        free: list[int] = []
        count = 0
        for s in sorted(group, key=lambda s: (s.start_ns, s.end_ns, s.seq)):
            while busy and busy[0][0] <= s.start_ns:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                sublane = heapq.heappop(free)
            else:
                sublane, count = count, count + 1
            heapq.heappush(busy, (s.end_ns, sublane))
            placed.append((s, sublane))
    return placed


def record_network(recorder: TraceRecorder, network: Network, *, counter_links: int = 16) -> None:
    """Every completed flow as a slice on each link it crossed; the busiest links' utilisation.

    The network must have had ``keep_completed = True`` before its flows started. Flow slices go
    on track ``"links: {kind}"``, lane ``"u->v"``; a flow occupies its links from its start until
    its last byte left (``sent_s``). Counters go on track ``"link utilisation"``.
    """
    graph = network.topology.graph
    for flow in network.completed:
        if not flow.route:
            continue
        args = {"src": flow.src, "dst": flow.dst, "bytes": flow.size_bytes, "flow": flow.id}
        name = flow.tag or f"{flow.src}->{flow.dst}"
        for u, v in flow.route:
            recorder.slice(
                f"links: {graph.succ[u][v]['kind']}", link_name((u, v)), name, flow.start_s, flow.sent_s, args
            )
    stats = network.stats
    capacity = {e: effective_bandwidth(graph.succ[e[0]][e[1]]) for e in stats}
    ranked = sorted(stats, key=lambda e: (-stats[e].bytes / capacity[e], e))[:counter_links]
    for edge, series in network.link_utilisation_series(ranked).items():
        for time_s, value in series:
            recorder.counter("link utilisation", link_name(edge), time_s, {"utilisation": value})
