"""The comparison as text, Markdown, JSON and CSV.

Every format carries the same facts: per category the rows, how many were predicted, MAPE and the
mean speed bias (see :mod:`experiments.validate_published.metrics`) and how often the simulator
chose the algorithm a row states; per predicted row the setup, measured and predicted values and
errors; per row not expressible every reason; and which missing presets or features would express
the most rows.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from experiments.validate_published.evaluate import CALIBRATION, PREDICTED, CategorySummary, RowResult

__all__ = [
    "CONVENTIONS",
    "CSV_COLUMNS",
    "FORMAT",
    "format_csv",
    "format_json",
    "format_markdown",
    "format_text",
    "id_list",
    "json_document",
    "unlock_counts",
]

FORMAT = "trainsim-validate-published"
CONVENTIONS = (
    "error = (predicted - measured) / measured on the metric as published; MAPE = mean |error|",
    "bias = predicted speed / measured speed - 1 (for a time: measured / predicted - 1): "
    "+ means trainsim is too fast (optimistic), - too slow",
    "algorithm: what the simulator ran (chosen, or pinned where the row pins it); "
    "'matches' counts rows that state the algorithm NCCL chose",
    "calibration rows: rows that set (or restate) a shipped constant; listed apart, never scored",
    "calibrated: the source's own one-device rate as one compute-only scalar on its distributed rows "
    "(the anchor itself not scored); rows without an anchor keep their uncalibrated value",
    "collective_topology_unknown: collective rows whose source does not show the topology; "
    "predicted on the row's preset with the band over the possible ones in the setup, scored apart",
)
CSV_COLUMNS = (
    "id",
    "category",
    "status",
    "hardware",
    "workload",
    "strategy",
    "metric",
    "unit",
    "measured",
    "predicted",
    "error_pct",
    "speed_bias_pct",
    "setup",
    "algorithm",
    "stated_algorithm",
    "algorithm_match",
    "reasons",
    "notes",
    "source",
    "role",
    "constant",
    "calibrated",
    "calibrated_error_pct",
    "calibrated_bias_pct",
    "anchor",
    "compute_scale",
)


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _algorithms(summary: CategorySummary) -> str:
    if not summary.algorithm_checked:
        return "-"
    return f"{summary.algorithm_matched}/{summary.algorithm_checked}"


_SUMMARY_HEADER = (
    "category", "rows", "predicted", "not expr.", "MAPE", "bias", "calibrated rows", "cal. MAPE",
    "cal. bias", "algorithm",
)  # fmt: skip


def _summary_cells(s: CategorySummary) -> tuple[str, ...]:
    counts = (str(s.rows), str(s.predicted), str(s.not_expressible))
    calibrated = (str(s.calibrated_rows), _pct(s.calibrated_mape_pct), _pct(s.calibrated_bias_pct, True))
    return (s.category, *counts, _pct(s.mape_pct), _pct(s.bias_pct, True), *calibrated, _algorithms(s))


def _calibrated_cell(r: RowResult) -> str:
    if r.calibrated is None:
        return "-"
    role = "anchor, " if r.anchor == r.id else ""
    return f"{_num(r.calibrated)} ({role}{_pct(r.calibrated_error_pct, True)}, x{r.compute_scale:.3f})"


def _errors(r: RowResult) -> tuple[str, str, str, str]:
    return _num(r.measured), _num(r.predicted), _pct(r.error_pct, True), _pct(r.speed_bias_pct, True)


def _algorithm_cell(result: RowResult) -> str:
    if not result.stated_algorithm:
        return result.algorithm or "-"
    verdict = "matches" if result.algorithm_match else "differs"
    return f"{result.algorithm} (row: {result.stated_algorithm}, {verdict})"


def _headline(results: Sequence[RowResult]) -> str:
    predicted = sum(1 for r in results if r.status == PREDICTED)
    calibration = sum(1 for r in results if r.role == CALIBRATION)
    apart = f" ({calibration} of them calibration rows, not scored)" if calibration else ""
    return (
        f"{len(results)} published rows: {predicted} predicted{apart}, "
        f"{len(results) - predicted} not expressible"
    )


def unlock_counts(results: Sequence[RowResult]) -> list[tuple[str, list[int | str]]]:
    """Each reason of the rows not expressible with the rows it blocks, most rows first."""
    rows: dict[str, list[int | str]] = {}
    for result in results:
        for reason in result.reasons:
            rows.setdefault(reason, []).append(result.id)
    order = Counter({reason: len(ids) for reason, ids in rows.items()})
    return [(reason, rows[reason]) for reason, _ in order.most_common()]


def _named_runs(names: Sequence[str]) -> list[str]:
    """``modern-03-10``: runs of ids that share a prefix and count up (``modern-03`` ... ``modern-10``)."""
    runs: list[list[str]] = []
    for name in names:
        prefix, _, number = name.rpartition("-")
        previous = runs[-1][-1] if runs else ""
        before, _, last = previous.rpartition("-")
        if number.isdigit() and last.isdigit() and before == prefix and int(last) + 1 == int(number):
            runs[-1].append(name)
        else:
            runs.append([name])
    return [run[0] if len(run) == 1 else f"{run[0]}-{run[-1].rpartition('-')[2]}" for run in runs]


def id_list(ids: Sequence[int | str]) -> str:
    """``1-12, 15, 17-19``: runs of consecutive row numbers; named ids (``modern-03``) in runs of
    their own (``modern-03-10``)."""
    named = [str(i) for i in ids if isinstance(i, str)]
    numbers = [i for i in ids if isinstance(i, int)]
    if named:
        return ", ".join(filter(None, (id_list(numbers) if numbers else "", *_named_runs(named))))
    ids = numbers
    parts, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            parts.append(str(ids[start]) if start == i - 1 else f"{ids[start]}-{ids[i - 1]}")
            start = i
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------
# Text


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "  ".join(out).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _text_rows(title: str, rows: Sequence[RowResult]) -> list[str]:
    if not rows:
        return []
    header = (
        "row",
        "category",
        "measured",
        "predicted",
        "error",
        "bias",
        "calibrated",
        "unit",
        "algorithm",
        "setup",
    )
    cells = [
        (str(r.id), r.category, *_errors(r), _calibrated_cell(r), r.unit, _algorithm_cell(r), r.setup)
        for r in rows
    ]
    return [
        "",
        title,
        *_text_table(header, cells, (True, False, True, True, True, True, False, False, False, False)),
    ]


def format_text(results: Sequence[RowResult], summaries: Sequence[CategorySummary]) -> str:
    """A plain-text report for the terminal."""
    out = [f"trainsim vs published GPU measurements: {_headline(results)}", *CONVENTIONS, ""]
    out += _text_table(
        _SUMMARY_HEADER,
        [_summary_cells(s) for s in summaries],
        (False, True, True, True, True, True, True, True, True, True),
    )
    predicted = [r for r in results if r.status == PREDICTED]
    out += _text_rows("Predicted rows", [r for r in predicted if r.role != CALIBRATION])
    calibration = [r for r in predicted if r.role == CALIBRATION]
    out += _text_rows("Calibration rows (set or restate a constant: not scored)", calibration)
    out += [f"{r.id:>4}  {r.constant}" for r in calibration]
    others = [r for r in results if r.status != PREDICTED]
    if others:
        out += ["", "Not expressible"]
        out += [f"{r.id:>4}  {r.category:<18}  {r.hardware}: {'; '.join(r.reasons)}" for r in others]
        out += ["", "What would express more rows"]
        out += [f"{len(ids):>4} rows ({id_list(ids)}): {reason}" for reason, ids in unlock_counts(others)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------
# Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


_MD_PREDICTED = (
    "row",
    "hardware",
    "metric",
    "setup",
    "measured",
    "predicted",
    "error",
    "bias",
    "calibrated (error, scale)",
    "algorithm",
    "notes",
)


def _md_row(r: RowResult) -> tuple[str, ...]:
    return (
        str(r.id),
        r.hardware,
        f"{r.metric} ({r.unit})",
        r.setup,
        *_errors(r),
        _calibrated_cell(r),
        _algorithm_cell(r),
        "; ".join(r.notes),
    )


def _md_predicted(results: Sequence[RowResult]) -> list[str]:
    out: list[str] = []
    for category in dict.fromkeys(r.category for r in results):
        out += ["", f"### {category}", ""]
        out += _md_table(_MD_PREDICTED, [_md_row(r) for r in results if r.category == category])
    return out


def _md_calibration(rows: Sequence[RowResult]) -> list[str]:
    out = ["", "## Calibration rows (not scored)", ""]
    out += [
        "These rows set a shipped constant, or measure the very quantity a constant is "
        "(`data/calibration.yaml` says which and why); they are listed here and in the summary's "
        "'calibration rows' line, never in a scored category.",
        "",
    ]
    return out + _md_table(("constant", *_MD_PREDICTED), [(r.constant, *_md_row(r)) for r in rows])


def format_markdown(
    results: Sequence[RowResult],
    summaries: Sequence[CategorySummary],
    provenance: Mapping[str, Any] | None = None,
) -> str:
    """The report as Markdown (``report.md``); ``provenance`` adds its section at the end."""
    out = ["# trainsim vs published GPU measurements", "", f"{_headline(results)}.", ""]
    out += [f"- {c}" for c in CONVENTIONS]
    out += ["", "## Summary per category", ""]
    out += _md_table(_SUMMARY_HEADER, [_summary_cells(s) for s in summaries])
    predicted = [r for r in results if r.status == PREDICTED and r.role != CALIBRATION]
    if predicted:
        out += ["", "## Predicted rows", *_md_predicted(predicted)]
    calibration = [r for r in results if r.status == PREDICTED and r.role == CALIBRATION]
    if calibration:
        out += _md_calibration(calibration)
    others = [r for r in results if r.status != PREDICTED]
    if others:
        out += ["", "## Not expressible", ""]
        out += _md_table(
            ("row", "category", "hardware", "workload / metric", "intended setup", "reasons"),
            [
                (
                    str(r.id),
                    r.category,
                    r.hardware,
                    f"{r.workload}; {r.metric}",
                    r.setup or "-",
                    "; ".join(r.reasons),
                )
                for r in others
            ],
        )
        out += ["", "## What would express more rows", ""]
        out += _md_table(("rows", "row numbers", "missing"), [
            (str(len(ids)), id_list(ids), reason) for reason, ids in unlock_counts(others)
        ])  # fmt: skip
    if provenance:
        out += ["", "## Provenance", "", "```json", json.dumps(provenance, indent=1, sort_keys=True), "```"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------
# JSON and CSV


def json_document(
    results: Sequence[RowResult],
    summaries: Sequence[CategorySummary],
    provenance: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The comparison as one JSON-ready document."""
    predicted = sum(1 for r in results if r.status == PREDICTED)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": 1,
        "conventions": list(CONVENTIONS),
        "rows_total": len(results),
        "predicted": predicted,
        "not_expressible": len(results) - predicted,
        "categories": [asdict(s) for s in summaries],
        "rows": [asdict(r) for r in results],
        "unlock": [{"reason": reason, "rows": ids} for reason, ids in unlock_counts(results)],
    }
    if provenance:
        doc["provenance"] = dict(provenance)
    return doc


def format_json(
    results: Sequence[RowResult],
    summaries: Sequence[CategorySummary],
    provenance: Mapping[str, Any] | None = None,
) -> str:
    return json.dumps(json_document(results, summaries, provenance), indent=1) + "\n"


def format_csv(results: Sequence[RowResult]) -> str:
    """One line per row (``comparison.csv``); lists are joined with `` | ``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        record = asdict(result)
        record["reasons"] = " | ".join(result.reasons)
        record["notes"] = " | ".join(result.notes)
        writer.writerow(["" if record[c] is None else record[c] for c in CSV_COLUMNS])
    return buffer.getvalue()
