"""The published-measurements page: per category, predicted against measured on log-log axes with
the y = x line and a +-10% band, each point a link to its source; then the summary per category,
every predicted row, the rows not expressible with their reasons, and the provenance.

Rendered from the ``trainsim-validate-published`` document (``comparison.json`` beside it,
:func:`experiments.validate_published.report.json_document`), so the page's numbers are the JSON's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from experiments.report_html.page import TableColumn, page, section, table
from experiments.report_html.svg import Guide, Point, Series, num, xy_chart

__all__ = ["BAND", "render_published", "source_url"]

BAND = 0.10  # the +-10% band drawn around y = x
_URL = re.compile(r"https?://\S+")


def source_url(source: str) -> str | None:
    """The first web address in a row's source text (the rest names the section or table)."""
    found = _URL.search(source or "")
    return found.group(0).rstrip(").,;") if found else None


def _point(row: Mapping[str, Any]) -> Point:
    tip = (
        f"#{row['id']} {row['metric']}: measured {num(row['measured'])} {row['unit']}, predicted "
        f"{num(row['predicted'])} ({row['error_pct']:+.1f}%); {row['hardware']}; {row['workload']}"
    )
    return Point(row["measured"], row["predicted"], tip, href=source_url(row["source"]),
                 attrs={"data-row": str(row["id"])})  # fmt: skip


def _category_chart(category: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    by_unit: dict[str, list[Point]] = {}
    for r in rows:
        if r["measured"] > 0 and r["predicted"] > 0:
            by_unit.setdefault(r["unit"], []).append(_point(r))
    if not by_unit:
        return ""
    values = [v for r in rows for v in (r["measured"], r["predicted"]) if v > 0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    guides = [
        Guide(f"within {BAND:.0%}", [(lo, lo * (1 - BAND)), (hi, hi * (1 - BAND)), (hi, hi * (1 + BAND)),
                                     (lo, lo * (1 + BAND))], band=True),
        Guide("y = x (prediction equals measurement)", [(lo, lo), (hi, hi)]),
    ]  # fmt: skip
    series = [Series(f"{unit}", points) for unit, points in by_unit.items()]
    title = f"{category['category']}: MAPE {category['mape_pct']:.1f}%, bias {category['bias_pct']:+.1f}% over {len(rows)} rows"
    return xy_chart(title, "measured (as published)", "predicted by trainsim", series, x_log=True, y_log=True,
                    guides=guides)  # fmt: skip


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _summary(doc: Mapping[str, Any]) -> str:
    columns = [
        TableColumn("category", lambda c: c["category"], is_text=True),
        TableColumn("rows", lambda c: c["rows"]),
        TableColumn("predicted", lambda c: c["predicted"]),
        TableColumn("not expressible", lambda c: c["not_expressible"]),
        TableColumn("MAPE", lambda c: c["mape_pct"], lambda v: "-" if v is None else f"{v:.1f}%"),
        TableColumn("mean bias", lambda c: c["bias_pct"], _pct),
        TableColumn("algorithm matches", lambda c: f"{c['algorithm_matched']}/{c['algorithm_checked']}"),
    ]
    return table(columns, doc["categories"])


def _rows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = [
        TableColumn("id", lambda r: r["id"]),
        TableColumn("category", lambda r: r["category"], is_text=True),
        TableColumn("hardware", lambda r: r["hardware"], is_text=True),
        TableColumn("metric", lambda r: r["metric"], is_text=True),
        TableColumn("unit", lambda r: r["unit"], is_text=True),
        TableColumn("measured", lambda r: r["measured"], num),
        TableColumn("predicted", lambda r: r["predicted"], num),
        TableColumn("error", lambda r: r["error_pct"], _pct),
        TableColumn("setup", lambda r: r["setup"], is_text=True),
    ]
    return table(columns, rows)


def _not_expressible(rows: Sequence[Mapping[str, Any]]) -> str:
    items = []
    for r in rows:
        url = source_url(r["source"])
        link = f' (<a href="{escape(url)}">source</a>)' if url else ""
        items.append(
            f"<li>#{r['id']} {escape(r['category'])}: {escape(r['metric'])} on {escape(r['hardware'])}{link}: "
            f"{escape('; '.join(r['reasons']))}</li>"
        )
    return f"<ul>{''.join(items)}</ul>" if items else "<p>Every selected row was predicted.</p>"


def render_published(doc: Mapping[str, Any], command: str) -> str:
    """The page for one ``trainsim-validate-published`` document."""
    predicted = [r for r in doc["rows"] if r["status"] == "predicted"]
    others = [r for r in doc["rows"] if r["status"] != "predicted"]
    charts = [
        _category_chart(c, [r for r in predicted if r["category"] == c["category"]])
        for c in doc["categories"]
    ]
    prov = doc.get("provenance") or {}
    facts = "".join(f"<li>{escape(k)}: {escape(str(v))}</li>" for k, v in prov.items() if k != "versions")
    versions = ", ".join(f"{k} {v}" for k, v in (prov.get("versions") or {}).items())
    body = [
        section(
            "Predicted vs measured",
            f"<p>{doc['predicted']} of {doc['rows_total']} published rows predicted with the shipped defaults "
            "(nothing fitted to them); click a point to open its source.</p>",
            f'<div class="cols">{"".join(charts)}</div>',
            anchor="charts",
        ),
        section(
            "Per category",
            _summary(doc),
            "<ul>" + "".join(f"<li>{escape(c)}</li>" for c in doc["conventions"]) + "</ul>",
        ),
        section("Predicted rows", _rows_table(predicted), anchor="rows"),
        section("Not expressible", _not_expressible(others), anchor="not-expressible"),
        section("Provenance", f"<ul>{facts}<li>versions: {escape(versions)}</li></ul>"),
    ]
    return page("trainsim against published measurements", command, body, doc)
