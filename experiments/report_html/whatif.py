"""The what-if's page: recommendation, sortable strategy table, and per strategy its step timeline
(by stream and pipeline stage), memory timeline (capacity line, peak marked), memory at the peak by
category and per-link utilisation; then the scaling curve and the assumptions.

Rendered from :func:`whatif_document`: the ``--format json`` document (records, recommendations,
network) plus the step timelines of the largest GPU count (the spans and memory samples the Chrome
trace holds), so the page's numbers are the JSON's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from experiments.report_html.page import TableColumn, page, section, table
from experiments.report_html.svg import Guide, Point, Series, bar_rows, lane_timeline, num, xy_chart
from simcore.compute.memory import CATEGORIES, MemoryTimeline
from simcore.report import SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    from simcore.whatif.sweep import WhatIfResult

__all__ = ["record_label", "render_whatif", "whatif_document"]

GIB = 2**30


def whatif_document(
    result: WhatIfResult,
    records: Sequence[Mapping[str, Any]],
    recommendations: Sequence[Mapping[str, Any]],
    extra: Mapping[str, Any],
    header: str,
) -> dict[str, Any]:
    """The JSON document the what-if prints, its table header, and one timeline per (cluster,
    synchronous strategy) at the largest GPU count: spans ``[stream, name, kind, start_s, end_s]``
    and memory samples ``[time_s, bytes, phase]`` (``memory_categories``: a thinned copy by category)."""
    gpus = max(rec.gpus for rec in result.recommendations)
    timelines = [
        {
            "cluster": cluster,
            "label": label,
            "gpus": count,
            "step_time_s": step.run.step_time_s,
            "spans": [[s.stream, s.name, s.kind, s.start_s, s.end_s] for s in step.run.spans],
            "memory": [[t, total, phase] for t, total, phase in step.run.memory.samples],
            "memory_categories": _category_samples(step.run.memory),
        }
        for (cluster, label, count), step in result.steps.items()
        if count == gpus
    ]
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "records": list(records),
        "recommendations": list(recommendations),
        **extra,
        "header": header,
        "timelines": timelines,
    }


def record_label(record: Mapping[str, Any]) -> str:
    """How the table names a record: the strategy, with its layout when it is not pure data parallelism
    (as :func:`simcore.whatif.layouts.point_label`)."""
    layout = record.get("layout")
    plain = not layout or layout == f"dp{record.get('dp')}"
    return str(record["strategy"]) if plain else f"{record['strategy']} {layout}"


def _gib(value: Any) -> str:
    return "-" if value is None else f"{value / GIB:.1f}"


def _fixed(spec: str) -> Any:
    return lambda v: "-" if v is None else format(v, spec)


def _columns() -> list[TableColumn]:
    return [
        TableColumn("cluster", lambda r: r["cluster"], is_text=True),
        TableColumn("strategy", record_label, is_text=True),
        TableColumn("GPUs", lambda r: r["gpus"]),
        TableColumn("step s", lambda r: r["step_time_s"], _fixed(".3f")),
        TableColumn("p99 s", lambda r: r["step_time_p99_s"], _fixed(".3f")),
        TableColumn("samples/s", lambda r: r["samples_per_s"], _fixed(".1f")),
        TableColumn("tokens/s", lambda r: r["tokens_per_s"], _fixed(".0f")),
        TableColumn("scaling", lambda r: r["scaling_efficiency"], _fixed(".2f")),
        TableColumn("MFU", lambda r: r["mfu"], _fixed(".2f")),
        TableColumn("exposed comm s", lambda r: r["exposed_comm_s"], _fixed(".3f")),
        TableColumn("peak GiB", lambda r: r["peak_memory_bytes"], _gib),
        TableColumn(
            "memory", lambda r: r.get("memory_status") or ("fits" if r["fits"] else "OOM"), is_text=True
        ),
    ]


def _detail_id(index: int) -> str:
    return f"detail-{index}"


def _recommendations(doc: Mapping[str, Any]) -> str:
    items = []
    for rec in doc["recommendations"]:
        name = rec["strategy"] or "none"
        items.append(
            f'<p class="rec"><strong>{escape(rec["cluster"])} at {rec["gpus"]} GPUs: {escape(name)}</strong> '
            f"&mdash; {escape(rec['reason'])}</p>"
        )
    return section("Recommendation", *items, anchor="recommendation")


# Points per category line: a step has hundreds of memory samples; the lines only need their shape
# (the total line and the peak keep every sample), and the page stays small.
_CATEGORY_POINTS = 80


def _category_samples(memory: MemoryTimeline) -> dict[str, Any]:
    """``{"categories": [...], "samples": [[t, [GiB per category]], ...]}`` at up to
    :data:`_CATEGORY_POINTS` of the step's samples (the peak's among them); empty where the run
    kept no categories."""
    per_sample = memory.category_samples
    if not per_sample:
        return {}
    times = [t for t, _, _ in memory.samples]
    peak = max(range(len(times)), key=lambda i: sum(per_sample[i]))
    stride = max(1, len(times) // _CATEGORY_POINTS)
    picked = sorted({*range(0, len(times), stride), peak, len(times) - 1})
    return {
        "categories": list(CATEGORIES),
        "samples": [[times[i], [round(v / GIB, 4) for v in per_sample[i]]] for i in picked],
    }


def _category_series(timeline: Mapping[str, Any], peak_gib: float) -> list[Series]:
    """One step line per memory category that reaches 1% of the peak."""
    data = timeline.get("memory_categories") or {}
    names, samples = data.get("categories", []), data.get("samples", [])
    series = []
    for k, name in enumerate(names):
        if max((v[k] for _, v in samples), default=0.0) < 0.01 * peak_gib:
            continue
        points: list[Point] = []
        for i, (t, values) in enumerate(samples):
            if i:
                points.append(Point(t * 1e3, samples[i - 1][1][k], ""))
            points.append(Point(t * 1e3, values[k], f"{name} {values[k]:.2f} GiB at {t * 1e3:.3f} ms"))
        series.append(Series(name, points, line=True, markers=False, faint=True))
    return series


def _memory_chart(timeline: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    """Memory in use over the step (a step line) and each category's share of it (faint lines), the
    device's capacity, and the peak marked."""
    samples = timeline["memory"]
    line: list[Point] = []
    previous = None
    for t, total, phase in samples:
        if previous is not None:
            line.append(Point(t * 1e3, previous / GIB, ""))
        line.append(Point(t * 1e3, total / GIB, phase))
        previous = total
    end_ms = timeline["step_time_s"] * 1e3
    if previous is not None:
        line.append(Point(end_ms, previous / GIB, ""))
    peak_t, peak_bytes, peak_phase = max(samples, key=lambda s: s[1]) if samples else (0.0, 0.0, "")
    capacity = record["memory_capacity_bytes"] / GIB
    peak_tip = (
        f"peak {peak_bytes / GIB:.2f} GiB at {peak_t * 1e3:.3f} ms ({peak_phase}) of {capacity:.1f} GiB"
    )
    series = [
        *_category_series(timeline, peak_bytes / GIB),
        Series("memory in use (tensors)", line, line=True, markers=False),
        Series("peak", [Point(peak_t * 1e3, peak_bytes / GIB, peak_tip)], emphasis=True),
    ]
    guides = [Guide(f"capacity {capacity:.1f} GiB", [(0.0, capacity), (max(end_ms, 1e-9), capacity)])]
    return xy_chart(
        f"memory timeline; reported peak {record['peak_memory_bytes'] / GIB:.1f} GiB ({record['peak_phase']})",
        "time in the step (ms)",
        "GiB per GPU",
        series,
        guides=guides,
    )


def _lanes(spans: Sequence[Sequence[Any]]) -> list[str]:
    """Streams in a reading order: per pipeline stage, compute before communication."""
    streams = list(dict.fromkeys(s[0] for s in spans))
    return sorted(streams, key=lambda name: (name.split("/")[0] if "/" in name else "", "comm" in name, name))


def _breakdown(record: Mapping[str, Any]) -> str:
    parts = record.get("memory_breakdown") or {}
    rows = [(c, parts.get(c, 0.0) / GIB, f"{parts.get(c, 0.0) / GIB:.2f} GiB") for c in CATEGORIES]
    capacity = record["memory_capacity_bytes"] / GIB
    total = f"{record['peak_memory_bytes'] / GIB:.1f}"
    return bar_rows(
        f"memory at the peak by category: {total} of {capacity:.1f} GiB (capacity dashed)",
        rows,
        limit=capacity,
    )


def _links(record: Mapping[str, Any]) -> str:
    util = record.get("link_utilisation") or {}
    if not util:
        return "<p>No collective used a link in this step.</p>"
    rows = [(kind, share * 100, f"{share * 100:.0f}%") for kind, share in sorted(util.items())]
    title = f"per-link utilisation (share of the step); bottleneck {record.get('bottleneck_link') or '-'}"
    return bar_rows(title, rows, limit=100.0)


def _detail(index: int, record: Mapping[str, Any], timeline: Mapping[str, Any] | None) -> str:
    label = record_label(record)
    parts = [f"<h3>{escape(record['cluster'])} / {escape(label)} at {record['gpus']} GPUs</h3>"]
    parts.append(f"<p>{escape(record['oom_verdict'])}</p>")
    if record.get("note"):
        parts.append(f'<p class="note">{escape(record["note"])}</p>')
    charts = []
    if timeline is not None:
        spans = timeline["spans"]
        lanes = _lanes(spans)
        charts.append(
            lane_timeline(
                f"step timeline: {num(timeline['step_time_s'] * 1e3)} ms, {len(spans)} operations",
                lanes,
                [tuple(s) for s in spans],
                timeline["step_time_s"],
            )
        )
        charts.append(_memory_chart(timeline, record))
    else:
        parts.append("<p>Simulated per rank without an operation timeline (parameter server).</p>")
    charts += [_breakdown(record), _links(record)]
    if record.get("stage_peak_memory_bytes"):
        stages = record["stage_peak_memory_bytes"]
        rows = [(f"stage {i}", b / GIB, f"{b / GIB:.1f} GiB") for i, b in enumerate(stages)]
        charts.append(
            bar_rows("peak memory per pipeline stage", rows, limit=record["memory_capacity_bytes"] / GIB)
        )
    body = "".join(parts) + f'<div class="cols">{"".join(charts)}</div>'
    return f'<section class="detail" id="{_detail_id(index)}">{body}</section>'


def _scaling(records: Sequence[Mapping[str, Any]]) -> str:
    counts = sorted({r["gpus"] for r in records})
    if len(counts) < 2:
        return ""
    figures = []
    for cluster in dict.fromkeys(r["cluster"] for r in records):
        by_label: dict[str, list[Point]] = {}
        for r in records:
            if r["cluster"] == cluster:
                tip = f"{record_label(r)} at {r['gpus']} GPUs: {r['samples_per_s']:.1f} samples/s"
                by_label.setdefault(record_label(r), []).append(Point(r["gpus"], r["samples_per_s"], tip))
        series = [Series(name, points, line=True) for name, points in by_label.items()]
        figures.append(
            xy_chart(
                f"{cluster}: throughput vs GPUs",
                "GPUs",
                "samples/s",
                series,
                x_log=True,
                y_log=True,
                x_ticks=counts,
            )
        )
    return section("Scaling", f'<div class="cols">{"".join(figures)}</div>')


def _assumptions(doc: Mapping[str, Any]) -> str:
    lines = [f"<li>{escape(line)}</li>" for line in doc.get("header", "").splitlines() if line]
    seen: dict[tuple[str, str], list[str]] = {}
    for r in doc["records"]:
        if r.get("precision"):
            names = seen.setdefault((r["precision"], r["optimizer_impl"]), [])
            if r["strategy"] not in names:
                names.append(r["strategy"])
    lines += [
        f"<li>{escape(', '.join(n))}: {escape(p)}, {escape(i)} optimizer</li>" for (p, i), n in seen.items()
    ]
    lines += [
        f"<li>{escape(n)}</li>" for n in dict.fromkeys(r["note"] for r in doc["records"] if r.get("note"))
    ]
    if doc.get("network"):
        net = ", ".join(f"{k} {v}" for k, v in doc["network"].items() if v is not None)
        lines.append(f"<li>network what-if: {escape(net)}</li>")
    return section("Assumptions", f"<ul>{''.join(lines)}</ul>", anchor="assumptions")


def render_whatif(doc: Mapping[str, Any], command: str) -> str:
    """The page for one what-if document (see :func:`whatif_document`)."""
    records = doc["records"]
    timelines = {(t["cluster"], t["label"], t["gpus"]): t for t in doc["timelines"]}
    top = max(r["gpus"] for r in records)
    chosen = {(rec["cluster"], rec["strategy"]) for rec in doc["recommendations"]}
    attrs, details = [], []
    for i, r in enumerate(records):
        row: dict[str, str] = {}
        if r["gpus"] == top:
            row = {"class": "pick", "data-detail": _detail_id(i), "title": "show its timeline and memory"}
            details.append(_detail(i, r, timelines.get((r["cluster"], record_label(r), r["gpus"]))))
        if (r["cluster"], record_label(r)) in chosen and r["gpus"] == top:
            row["class"] = "pick best"
        attrs.append(row)
    model = records[0]["model"] if records else "?"
    body = [
        _recommendations(doc),
        section(
            "Strategies",
            "<p>Click a column header to sort; click a row (or focus it and press Enter) to show that "
            f"strategy's timeline and memory below. Bold: the recommendation. Rows at {top} GPUs have details.</p>",
            table(_columns(), records, row_attrs=attrs),
            anchor="strategies",
        ),
        section("Per strategy", *details, anchor="details"),
        _scaling(records),
        _assumptions(doc),
    ]
    return page(f"trainsim what-if: {model}", command, body, doc)
