"""Each page kind opened in a real headless Chromium, at 1280 px and at phone width: the charts drew
(every chart and mark has a non-zero size), no error and no console message at all, no sideways
scrolling, and the hover label of a Pareto mark names its layout; then a screenshot.

Needs Debian's ``chromium`` (CI installs it); skipped with a note without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from experiments.report_html.nccl import render_nccl
from experiments.report_html.plan import render_plan
from experiments.report_html.published import render_published
from experiments.report_html.whatif import render_whatif
from experiments.report_html.write import write_report
from tests.experiments.report_html.browser import CHROMIUM, screenshot, selfcheck
from tests.experiments.report_html.docs import nccl_doc, plan_doc, published_doc, whatif_doc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's chromium)"),
]

# A phone-width window: headless Chromium lays out no narrower than 500 CSS px (a 390 px window gives
# 500), so that is the width checked; the layout has no fixed width above it anyway.
PHONE = (500, 844)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    whatif = whatif_doc()
    renders: dict[str, Callable[[], str]] = {
        "what_if": lambda: render_whatif(whatif, "python -m experiments.what_if --gpus 2,4"),
        "plan": lambda: render_plan(plan_doc(whatif), "python -m experiments.plan"),
        "nccl_sim": lambda: render_nccl(nccl_doc(), "python -m experiments.nccl_sim --compare log.txt"),
        "validate_published": lambda: render_published(
            published_doc(), "python -m experiments.validate_published"
        ),
    }
    root = tmp_path_factory.mktemp("pages")
    return {kind: write_report(root / kind, render()) for kind, render in renders.items()}


def _clean(check: dict[str, Any]) -> None:
    assert check["errors"] == [] and check["console"] == [], (check["errors"], check["console"])
    assert check["charts"] > 0 and check["empty_charts"] == 0
    assert check["marks"] > 0 and check["empty_marks"] == 0
    assert check["overflow_px"] == 0  # tables scroll inside their box; the page never does


@pytest.mark.parametrize("kind", ["what_if", "plan", "nccl_sim", "validate_published"])
def test_page_draws_without_errors_at_desktop_width(
    pages: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    check = selfcheck(pages[kind], width=1280)
    _clean(check)
    assert check["width"] == 1280
    png = screenshot(pages[kind], tmp_path / f"{kind}.png", width=1280, height=900)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("kind", ["what_if", "plan", "nccl_sim", "validate_published"])
def test_page_works_at_phone_width(pages: dict[str, Path], kind: str) -> None:
    check = selfcheck(pages[kind], width=PHONE[0], height=PHONE[1])
    _clean(check)
    assert check["width"] == PHONE[0]


def test_pareto_hover_names_the_layout(pages: dict[str, Path]) -> None:
    check = selfcheck(pages["plan"])
    assert check["layout"] and check["hover_names_layout"], check
    assert check["hover"].startswith(check["layout"])


def test_the_harness_sees_a_broken_page(tmp_path: Path) -> None:
    # A page whose script throws and logs must fail the checks above: the harness is not blind.
    page = tmp_path / "broken.html"
    page.write_text(
        '<html><body><svg class="chart" width="0" height="0"></svg><div id="tip"></div><script>'
        'console.log("noise");document.body.setAttribute("data-selfcheck",JSON.stringify({errors:["x"]}));'
        "throw new Error('boom')</script></body></html>",
        encoding="utf-8",
    )
    check = selfcheck(page)
    assert check["errors"] == ["x"]
    assert any("noise" in line for line in check["console"]) and any(
        "boom" in line for line in check["console"]
    )
