"""The chart helpers: ticks, scales, and where marks land (positions counted by hand)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from experiments.report_html.svg import (
    Guide,
    Point,
    Series,
    _Scale,
    bar_rows,
    lane_timeline,
    log_ticks,
    nice_ticks,
    tick_text,
    xy_chart,
)
from tests.experiments.report_html.html_parts import read


def test_log_ticks_are_powers_of_ten_or_their_2_and_5_multiples() -> None:
    assert log_ticks(1, 1000) == [1, 10, 100, 1000]
    assert log_ticks(3, 30) == [5, 10, 20]


def test_nice_ticks_step_by_1_2_or_5() -> None:
    assert nice_ticks(0, 9.5) == [0, 2, 4, 6, 8]
    assert nice_ticks(0, 400) == [0, 100, 200, 300, 400]


@given(st.floats(0.001, 1e6), st.floats(1.01, 1e4))
def test_nice_ticks_cover_the_range(lo: float, ratio: float) -> None:
    hi = lo * ratio
    ticks = nice_ticks(lo, hi)
    step = ticks[1] - ticks[0]
    slack = step * 1e-6  # float steps: 1.2 may sit a hair either side of its tick
    assert ticks[0] <= lo + slack and lo < ticks[0] + step + slack
    assert hi - step - slack < ticks[-1] <= hi + slack


def test_tick_text_is_short() -> None:
    assert [tick_text(v) for v in (8.0, 2_000_000, 1500, 0.25, 3e9)] == ["8", "2M", "1.5K", "0.25", "3G"]


def test_log_scale_puts_the_geometric_mean_in_the_middle() -> None:
    scale = _Scale(1.0, 100.0, True, 0.0, 200.0)
    assert scale(10.0) == 100.0 and scale(1.0) == 0.0 and scale(100.0) == 200.0
    linear = _Scale(0.0, 4.0, False, 100.0, 300.0)
    assert linear(1.0) == 150.0


def test_every_point_is_a_labelled_mark_with_its_own_shape_per_series() -> None:
    series = [
        Series("a", [Point(1, 1, 'one "quoted"'), Point(2, 4, "two", href="https://example.org/x")]),
        Series("b", [Point(3, 9, "three")], line=True),
    ]
    html = xy_chart("t", "x", "y", series, guides=[Guide("y = x", [(1, 1), (3, 3)])])
    parts = read(html)
    assert [m["data-tip"] for m in parts.marks] == ['one "quoted"', "two", "three"]
    assert parts.links == ["https://example.org/x"]
    assert (
        "<circle" in html and "<rect" in html
    )  # series a circles, series b squares: shape, not colour alone
    assert "a (2)" in " ".join(parts.text) and "y = x" in " ".join(parts.text)


def test_a_series_without_markers_draws_only_its_line() -> None:
    html = xy_chart(
        "t", "x", "y", [Series("m", [Point(0, 1, ""), Point(1, 2, "")], line=True, markers=False)]
    )
    assert read(html).marks == [] and "<polyline" in html


def test_timeline_bar_spans_its_share_of_the_step() -> None:
    # Plot area x from 110 to 640 - 12 = 628 (518 px); a span 0.25..0.5 of a 1 s step starts at
    # 110 + 0.25 * 518 = 239.5 and is 0.25 * 518 = 129.5 wide.
    html = lane_timeline("t", ["compute", "comm"], [("comm", "all_reduce b0", "all_reduce", 0.25, 0.5)], 1.0)
    bar = re.search(r'<rect class="mark" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', html)
    assert bar is not None
    assert (float(bar.group(1)), float(bar.group(3))) == (239.5, 129.5)
    assert float(bar.group(2)) == 8 + 22 + 3  # second lane: top 8, a lane 22 high, 3 inset
    assert "all_reduce b0" in read(html).marks[0]["data-tip"]


def test_bars_scale_to_the_limit_when_it_is_larger() -> None:
    # Bars from x = 150 to 640 - 90 = 550 (400 px): 20 of a limit of 80 is 100 px wide.
    html = bar_rows("t", [("params", 20.0, "20 GiB")], limit=80.0)
    width = re.search(r'<rect class="mark" x="150(?:\.0)?" y="[\d.]+" width="([\d.]+)"', html)
    assert width is not None and float(width.group(1)) == 100.0
    assert 'class="limit"' in html and "20 GiB" in html
