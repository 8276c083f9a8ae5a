"""The what-if page's memory timeline by category: the categories add up to the total line."""

from __future__ import annotations

from experiments.report_html.whatif import GIB, _category_samples, _category_series
from simcore.compute.memory import CATEGORIES, MemoryTimeline


def _timeline(changes: int) -> MemoryTimeline:
    memory = MemoryTimeline(80 * GIB, category_samples=[])
    memory.apply([("params", 4 * GIB), ("optimizer", 8 * GIB)], "start", 0.0)
    for i in range(changes):
        memory.apply([("activations", 0.5 * GIB)], f"forward {i}", 1e-3 * (i + 1))
    for i in range(changes):
        memory.apply(
            [("activations", -0.5 * GIB), ("grads", 0.25 * GIB)], f"backward {i}", 1e-3 * (changes + i + 1)
        )
    return memory


def test_each_kept_sample_splits_its_total_by_category_and_keeps_the_peak() -> None:
    memory = _timeline(300)
    data = _category_samples(memory)
    assert data["categories"] == list(CATEGORIES)
    totals = {t: total for t, total, _ in memory.samples}
    assert len(data["samples"]) <= 90  # thinned (601 samples in the step)
    for t, values in data["samples"]:
        assert abs(sum(values) - totals[t] / GIB) < 1e-3  # rounded to 1e-4 GiB per category
    peak_t = max(memory.samples, key=lambda s: s[1])[0]
    assert peak_t in {t for t, _ in data["samples"]}  # 12 + 150 GiB at the end of forward


def test_a_line_per_category_that_matters() -> None:
    memory = _timeline(20)
    timeline = {"memory_categories": _category_samples(memory)}
    names = [s.name for s in _category_series(timeline, peak_gib=22.0)]
    assert names == ["params", "grads", "optimizer", "activations"]  # buffers, temp, overhead stay at 0


def test_a_run_without_categories_draws_none() -> None:
    memory = MemoryTimeline(80 * GIB)
    memory.apply([("params", GIB)], "start", 0.0)
    assert _category_samples(memory) == {} and _category_series({"memory_categories": {}}, 1.0) == []
