"""The simulated nccl-tests page: bus bandwidth and time against size, one series per (algorithm,
protocol) NCCL's rules chose, one per pinned combination the topology allows, and the measured
points of a real nccl-tests log (``--compare LOG``) over them; then the table.

Rendered from the ``nccl_sim.json`` document beside it (the ``--format json`` document plus
``alternatives`` and ``measured``), so the page's numbers are the JSON's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from experiments.report_html.page import TableColumn, page, section, table
from experiments.report_html.svg import Point, Series, num, xy_chart

__all__ = ["render_nccl", "size_text"]


def size_text(size: float) -> str:
    """A buffer size as nccl-tests' suffixes write it (powers of 1024)."""
    for scale, suffix in ((2**30, "G"), (2**20, "M"), (2**10, "K")):
        if size >= scale:
            return f"{size / scale:g}{suffix}"
    return f"{size:g}"


def _chosen(results: Sequence[Mapping[str, Any]], y: str) -> list[Series]:
    """NCCL's choice, split where the (algorithm, protocol) changes, one series per combination."""
    groups: dict[str, list[Point]] = {}
    for r in results:
        name = f"chosen: {r['algorithm']}/{r['protocol']}"
        tip = (
            f"{size_text(r['size_bytes'])} B, {r['algorithm']}/{r['protocol']} (NCCL's choice): "
            f"{num(r['busbw_GBps'])} GB/s busbw, {num(r['time_us'])} us"
        )
        groups.setdefault(name, []).append(Point(r["size_bytes"], r[y], tip))
    return [Series(name, points, line=True, emphasis=True) for name, points in groups.items()]


def _alternatives(doc: Mapping[str, Any], y: str) -> list[Series]:
    series = []
    for alt in doc.get("alternatives") or []:
        name = f"pinned: {alt['algorithm']}/{alt['protocol']}"
        points = [
            Point(r["size_bytes"], r[y], f"{size_text(r['size_bytes'])} B, {name}: "
                  f"{num(r['busbw_GBps'])} GB/s busbw, {num(r['time_us'])} us")
            for r in alt["results"]
        ]  # fmt: skip
        series.append(Series(name, points, line=True, faint=True))
    return series


def _measured(doc: Mapping[str, Any], y: str) -> list[Series]:
    measured = doc.get("measured")
    if not measured:
        return []
    key = "busbw_GBps" if y == "busbw_GBps" else "time_us_mean"
    points = [
        Point(r["size_bytes"], r[key], f"{size_text(r['size_bytes'])} B measured: "
              f"{num(r['busbw_GBps'])} GB/s busbw, {num(r['time_us_mean'])} us ({measured['source']})")
        for r in measured["rows"]
        if r.get(key) and r[key] > 0
    ]  # fmt: skip
    return [Series(f"measured ({measured['source']})", points, emphasis=True)]


def _charts(doc: Mapping[str, Any]) -> str:
    results = doc["results"]
    figures = []
    for y, label, log in (("busbw_GBps", "bus bandwidth (GB/s)", False), ("time_us", "time (us)", True)):
        series = _measured(doc, y) + _chosen(results, y) + _alternatives(doc, y)
        figures.append(
            xy_chart(
                f"{doc['op']} on {doc['topology']}, {doc['ranks']} ranks: {label} vs size",
                "size (bytes)",
                label,
                series,
                x_log=True,
                y_log=log,
            )
        )
    return f'<div class="cols">{"".join(figures)}</div>'


def _columns() -> list[TableColumn]:
    def fixed(spec: str) -> Any:
        return lambda v: "-" if v is None else format(v, spec)

    return [
        TableColumn("size (B)", lambda r: r["size_bytes"]),
        TableColumn("count", lambda r: r["count"]),
        TableColumn("time (us)", lambda r: r["time_us"], fixed(".2f")),
        TableColumn("algbw (GB/s)", lambda r: r["algbw_GBps"], fixed(".2f")),
        TableColumn("busbw (GB/s)", lambda r: r["busbw_GBps"], fixed(".2f")),
        TableColumn("algorithm", lambda r: r["algorithm"], is_text=True),
        TableColumn("protocol", lambda r: r["protocol"], is_text=True),
        TableColumn("bottleneck link", lambda r: r["bottleneck_link"], is_text=True),
        TableColumn("closed form (us)", lambda r: r["closed_form_us"], fixed(".2f")),
    ]


def render_nccl(doc: Mapping[str, Any], command: str) -> str:
    """The page for one ``nccl_sim.json`` document."""
    notes = [f"<p>{escape(n)}</p>" for n in doc.get("notes", [])]
    measured = doc.get("measured") or {}
    ranks = sorted({r["ranks"] for r in measured.get("rows", []) if r.get("ranks")})
    if ranks and ranks != [doc["ranks"]]:
        notes.append(
            f'<p class="note">The measured log ran on {", ".join(map(str, ranks))} ranks, the simulation on '
            f"{doc['ranks']}: the two are not the same experiment.</p>"
        )
    intro = (
        f"<p>Simulated {escape(doc['op'])} ({escape(doc['type'])}, {escape(doc['mode'])} mode) over "
        f"{doc['ranks']} ranks of {escape(doc['topology'])}; average bus bandwidth "
        f"{num(doc['avg_busbw_GBps'])} GB/s. busbw = algbw x the nccl-tests factor of the op.</p>"
    )
    body = [
        section("Bandwidth and time vs size", intro, *notes, _charts(doc), anchor="charts"),
        section("Sizes (NCCL's choice)", table(_columns(), doc["results"]), anchor="table"),
    ]
    return page(f"trainsim nccl_sim: {doc['op']} on {doc['topology']}", command, body, doc)
