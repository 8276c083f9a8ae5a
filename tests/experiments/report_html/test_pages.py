"""The four pages, read back as HTML: self-contained, the JSON's numbers in their tables and marks,
the command and version shown, every chart mark labelled (not colour alone)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import simcore
from experiments.report_html.nccl import render_nccl, size_text
from experiments.report_html.plan import render_plan
from experiments.report_html.published import render_published, source_url
from experiments.report_html.whatif import record_label, render_whatif
from tests.experiments.report_html.docs import nccl_doc, plan_doc, published_doc, whatif_doc
from tests.experiments.report_html.html_parts import Parts, read

COMMAND = "python -m experiments.what_if --gpus '2,4' --out runs/x"


@pytest.fixture(scope="module")
def whatif() -> dict[str, Any]:
    return whatif_doc()


def _common(html: str, doc: dict[str, Any]) -> Parts:
    """What every page must hold: its data verbatim, the command and version, no outside resource."""
    parts = read(html)
    assert parts.data == json.loads(json.dumps(doc))
    assert parts.external == []  # nothing fetched: opens from file:// with no network
    text = " ".join(parts.text)
    assert COMMAND in text and f"trainsim {simcore.__version__}" in text
    assert parts.svgs > 0 and all(m["data-tip"] for m in parts.marks)
    return parts


def test_whatif_page_shows_every_record_and_its_numbers(whatif: dict[str, Any]) -> None:
    parts = _common(render_whatif(whatif, COMMAND), whatif)
    for r in whatif["records"]:
        assert record_label(r) in parts.cells
        assert f"{r['step_time_s']:.3f}" in parts.cells and f"{r['samples_per_s']:.1f}" in parts.cells
        assert f"{r['peak_memory_bytes'] / 2**30:.1f}" in parts.cells
    rows = len(whatif["records"])
    assert len(parts.cells) == rows * 12  # twelve columns, one row per record
    text = " ".join(parts.text)
    for rec in whatif["recommendations"]:
        assert rec["reason"] in text


def test_whatif_page_draws_a_timeline_and_memory_per_strategy(whatif: dict[str, Any]) -> None:
    html = render_whatif(whatif, COMMAND)
    top = max(r["gpus"] for r in whatif["records"])
    details = [r for r in whatif["records"] if r["gpus"] == top]
    assert html.count('class="detail"') == len(details) == 2
    spans = sum(len(t["spans"]) for t in whatif["timelines"])
    assert spans > 0 and html.count('<rect class="mark"') >= spans  # a bar per operation (plus bars)
    assert html.count('class="limit"') >= len(details)  # the capacity line beside each memory breakdown
    assert "peak " in html and "GiB at" in html  # the marked peak of each memory timeline


def test_whatif_timeline_is_the_largest_gpu_count_only(whatif: dict[str, Any]) -> None:
    assert {t["gpus"] for t in whatif["timelines"]} == {4}
    assert {t["label"] for t in whatif["timelines"]} == {"ddp", "fsdp"}


def test_plan_marks_name_their_layout(whatif: dict[str, Any]) -> None:
    doc = plan_doc(whatif)
    parts = _common(render_plan(doc, COMMAND), doc)
    laid = [m for m in parts.marks if "data-layout" in m]
    ranked = sum(len(c["ranked"]) for c in doc["gpu_counts"])
    assert len(laid) == ranked + len(doc["gpu_counts"]) + len(doc["pareto_gpus"]) + ranked + len(
        doc["pareto_cost"]
    )
    assert all(m["data-layout"] in m["data-tip"] for m in laid)
    for c in doc["gpu_counts"]:
        assert c["why"] in " ".join(parts.text)
        for r in c["ranked"]:
            assert r["layout"]["label"] in parts.cells and f"{r['step_time_s']:.3f}" in parts.cells


def test_nccl_page_has_chosen_pinned_and_measured_series() -> None:
    doc = nccl_doc()
    parts = _common(render_nccl(doc, COMMAND), doc)
    tips = [m["data-tip"] for m in parts.marks]
    measured = [t for t in tips if "measured" in t]
    assert len(measured) == 2 * len(doc["measured"]["rows"])  # busbw and time charts
    pinned = {(a["algorithm"], a["protocol"]) for a in doc["alternatives"]}
    assert pinned == {("ring", "LL"), ("ring", "Simple"), ("tree", "LL"), ("tree", "Simple")}
    assert any("nvls/LL, nvls/Simple" in n for n in doc["notes"])  # refused on A100, named once
    for r in doc["results"]:
        assert f"{r['busbw_GBps']:.2f}" in parts.cells
    assert "not the same experiment" not in render_nccl(doc, COMMAND)  # 8 measured ranks, 8 simulated


def test_nccl_page_warns_when_the_log_ran_on_other_ranks() -> None:
    doc = nccl_doc()
    doc["measured"]["rows"] = [{**r, "ranks": 16} for r in doc["measured"]["rows"]]
    assert "ran on 16 ranks, the simulation on 8" in render_nccl(doc, COMMAND)


def test_published_points_link_to_their_sources() -> None:
    doc = published_doc()
    parts = _common(render_published(doc, COMMAND), doc)
    points = [m for m in parts.marks if "data-row" in m]
    drawn = [
        r for r in doc["rows"] if r["status"] == "predicted" and r["measured"] > 0 and r["predicted"] > 0
    ]
    assert len(points) == len(drawn)
    urls = {source_url(r["source"]) for r in drawn}
    assert urls - {None} <= set(parts.links) and len(urls - {None}) > 5
    assert html_has_band(render_published(doc, COMMAND))


def html_has_band(html: str) -> bool:
    return 'class="band"' in html and 'class="guide"' in html


def test_source_url_takes_the_address_out_of_the_source_text() -> None:
    assert source_url("https://example.org/a/b.md (section 'Results')") == "https://example.org/a/b.md"
    assert source_url("the paper, table 3") is None


def test_size_text_uses_nccl_suffixes() -> None:
    assert [size_text(s) for s in (8, 4096, 3 * 2**20, 2**30)] == ["8", "4K", "3M", "1G"]


def test_default_whatif_page_fits_in_two_megabytes(whatif: dict[str, Any]) -> None:
    # The default run's page is ~1.3 MB (2 clusters x 6 timelines); this small one must be far below.
    assert len(render_whatif(whatif, COMMAND).encode()) < 200_000
