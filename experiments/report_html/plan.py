"""The planner's page: Pareto frontiers (throughput vs GPUs, and vs cost with a price), every mark
labelled on hover by its layout and numbers, the ranked table per GPU count, and why the winner wins.

Rendered from the ``trainsim-plan`` document (:func:`experiments.plan.report.plan_document`, the
``plan.json`` beside the page), so the page's numbers are the JSON's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from experiments.report_html.page import TableColumn, page, section, table
from experiments.report_html.svg import Point, Series, num, xy_chart

__all__ = ["render_plan"]

GIB = 2**30


def _rate(record: Mapping[str, Any]) -> tuple[float, str]:
    """Throughput and its unit: tokens/s for language models, samples/s otherwise (as the planner ranks)."""
    tokens = record.get("tokens_per_s")
    return (float(tokens), "tokens/s") if tokens else (float(record["samples_per_s"]), "samples/s")


def _tip(record: Mapping[str, Any], what: str) -> str:
    rate, unit = _rate(record)
    text = (
        f"{record['layout']['label']} at {record['gpus']} GPUs ({what}): {num(rate)} {unit}, "
        f"step {record['step_time_s']:.3f} s, MFU {record['mfu']:.2f}, peak {record['peak_memory_bytes'] / GIB:.1f} GiB"
    )
    if record.get("cost_per_million") is not None:
        text += f", ${record['cost_per_million']:.4f} per M {unit.split('/')[0]}"
    return text


def _point(record: Mapping[str, Any], x: float, what: str) -> Point:
    rate, _ = _rate(record)
    attrs = {"data-layout": str(record["layout"]["label"])}
    return Point(x, rate, _tip(record, what), attrs=attrs)


def _frontier_vs_gpus(doc: Mapping[str, Any]) -> str:
    ranked = [r for c in doc["gpu_counts"] for r in c["ranked"]]
    if not ranked:
        return "<p>No layout fits at any GPU count: nothing to plot.</p>"
    unit = _rate(ranked[0])[1]
    bests = [c["ranked"][0] for c in doc["gpu_counts"] if c["ranked"]]
    series = [
        Series("ranked layouts", [_point(r, r["gpus"], f"rank {r['rank']}") for r in ranked]),
        Series("best per GPU count", [_point(r, r["gpus"], "best") for r in bests], line=True),
        Series(
            "Pareto frontier", [_point(r, r["gpus"], "Pareto") for r in doc["pareto_gpus"]], emphasis=True
        ),
    ]
    counts = sorted({c["gpus"] for c in doc["gpu_counts"]})
    return xy_chart(
        "throughput vs GPUs (hover or focus a mark for its layout)", "GPUs", unit, series,
        x_log=True, y_log=True, x_ticks=counts, chart_class="pareto",
    )  # fmt: skip


def _frontier_vs_cost(doc: Mapping[str, Any]) -> str:
    priced = [r for c in doc["gpu_counts"] for r in c["ranked"] if r.get("cost_per_million") is not None]
    if not priced:
        return "<p>No price given (<code>--price-per-gpu-hour</code>): no cost frontier.</p>"
    unit = _rate(priced[0])[1]
    series = [
        Series("ranked layouts", [_point(r, r["cost_per_million"], f"rank {r['rank']}") for r in priced]),
        Series(
            "Pareto frontier (faster and cheaper than no other)",
            [_point(r, r["cost_per_million"], "Pareto") for r in doc["pareto_cost"]],
            line=True,
            emphasis=True,
        ),
    ]
    return xy_chart(
        "throughput vs cost",
        f"$ per million {unit.split('/')[0]}",
        unit,
        series,
        y_log=True,
        chart_class="pareto",
    )


def _columns(unit: str) -> list[TableColumn]:
    def fixed(spec: str) -> Any:
        return lambda v: "-" if v is None else format(v, spec)

    return [
        TableColumn("rank", lambda r: r["rank"]),
        TableColumn("layout", lambda r: r["layout"]["label"], is_text=True),
        TableColumn(unit, lambda r: _rate(r)[0], fixed(".0f")),
        TableColumn("step s", lambda r: r["step_time_s"], fixed(".3f")),
        TableColumn("MFU", lambda r: r["mfu"], fixed(".2f")),
        TableColumn("exposed comm s", lambda r: r["exposed_comm_s"], fixed(".3f")),
        TableColumn("peak GiB", lambda r: r["peak_memory_bytes"], lambda v: f"{v / GIB:.1f}"),
        TableColumn("train hours", lambda r: r.get("train_hours"), fixed(".1f")),
        TableColumn("$ per M", lambda r: r.get("cost_per_million"), fixed(".4f")),
    ]


def _count_section(count: Mapping[str, Any]) -> str:
    head = (
        f"<h3>{count['gpus']} GPUs ({count['nodes']} node(s) of {escape(str(count['device']))})</h3>"
        f"<p>{count['considered']} layouts considered, {count['pruned']} pruned by their memory floor, "
        f"{count['evaluated']} timed, {count['no_fit']} do not fit.</p>"
    )
    if count.get("why"):
        head += f'<p class="rec"><strong>why:</strong> {escape(count["why"])}</p>'
    if count.get("skipped"):
        head += f'<p class="note">{escape(str(count["skipped"]))}</p>'
    if not count["ranked"]:
        return head + "<p>No layout fits.</p>"
    unit = _rate(count["ranked"][0])[1]
    attrs: Sequence[Mapping[str, str]] = [
        {"class": "best"} if r["rank"] == 1 else {} for r in count["ranked"]
    ]
    return head + table(_columns(unit), count["ranked"], row_attrs=attrs)


def render_plan(doc: Mapping[str, Any], command: str) -> str:
    """The page for one ``trainsim-plan`` document."""
    batch = f"global batch {doc['global_batch']}" + (
        f" ({doc['tokens_per_step']:,} tokens)" if doc.get("tokens_per_step") else ""
    )
    intro = (
        f"<p>{escape(doc['model'])} ({doc['params'] / 1e9:.2f} B parameters) on {escape(doc['cluster'])}, "
        f"{batch}; {doc['configs_considered']} configurations considered, {doc['configs_pruned']} pruned, "
        f"{doc['configs_evaluated']} evaluated{' (interrupted)' if doc['interrupted'] else ''}.</p>"
    )
    search = ", ".join(f"{k}: {v}" for k, v in doc["search"].items() if v is not None)
    body = [
        section("Search", intro, f"<p>Search space: {escape(search)}.</p>", anchor="search"),
        section(
            "Pareto frontiers",
            f'<div class="cols">{_frontier_vs_gpus(doc)}{_frontier_vs_cost(doc)}</div>',
            anchor="pareto",
        ),
        section(
            "Ranked layouts per GPU count", *(_count_section(c) for c in doc["gpu_counts"]), anchor="ranked"
        ),
    ]
    return page(f"trainsim plan: {doc['model']} on {doc['cluster']}", command, body, doc)
