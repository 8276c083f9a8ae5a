"""The planner's benchmark rows: what they measure and against which targets (never the times)."""

from __future__ import annotations

import json

import pytest

from experiments.bench.cli import main
from experiments.bench.planner import (
    ENTRY_POINTS,
    SWEEP_CONFIGS,
    PlannerBenchRow,
    fixed_sweep,
    format_planner_table,
    plan_row,
    planner_rows,
    three_d_row,
)


def test_quick_rows_cover_every_measurement() -> None:
    rows = planner_rows(quick=True)
    assert [r.case for r in rows] == [
        "fast path",
        "sweep (local)",
        "--help experiments.plan",
        "selection all_reduce 1GiB",
    ]
    fast, sweep, help_row, selection = rows
    assert fast.unit == "ms/config" and fast.target == 2.0 and fast.configs == 36 and fast.value > 0
    assert "discrete-event path median" in fast.note
    assert sweep.configs == 24 and sweep.value > 0 and "configs/s" in sweep.note
    assert help_row.target == 0.3 and help_row.ok == (help_row.value <= 0.3)
    assert selection.gpus == 16 and selection.note.startswith("chose ")
    lines = format_planner_table(rows).splitlines()
    assert lines[0].split()[:4] == ["case", "gpus", "configs", "value"]
    assert len(lines) == 1 + len(rows)


def test_the_three_d_row_times_a_warm_layout_against_five_ms() -> None:
    row = three_d_row(repeats=1)
    assert (row.case, row.gpus, row.configs, row.unit, row.target) == (
        "3-D fast path",
        1024,
        1,
        "ms/config",
        5.0,
    )
    assert row.value > 0 and "first call" in row.note and "tp8 pp8 vpp2" in row.note


def test_the_fixed_sweep_is_exactly_ten_thousand_configurations() -> None:
    parts = fixed_sweep()
    assert sum(len(tasks) for _, tasks in parts) == SWEEP_CONFIGS
    assert parts == fixed_sweep() or [t for _, t in parts] == [
        t for _, t in fixed_sweep()
    ]  # the same every time
    assert {job.cluster for job, _ in parts} >= {"dgx-a100", "hgx-h100", "g5.48xlarge"}


def test_every_entry_point_is_timed() -> None:
    assert {"experiments.plan", "experiments.what_if", "calibrate.fit"} <= set(ENTRY_POINTS)


def test_bench_prints_planner_records_last_in_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from experiments.bench import cli

    row = PlannerBenchRow("fast path", 8, 36, 1.0, "ms/config", 5.0, True)
    monkeypatch.setattr(cli, "measure_planner", lambda **kwargs: [row])
    assert main(["--quick", "--gpus", "8", "--planner", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records[-1]["case"] == "fast path" and records[-1]["target"] == 5.0


def test_the_plan_row_counts_what_the_plan_timed() -> None:
    args = ("--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "64",
            "--max-tp", "1", "--max-pp", "1", "--recompute", "off", "--max-micro-batch", "2", "--workers", "1")  # fmt: skip
    row = plan_row(args)
    assert row.case == "plan gpt2-small" and row.unit == "s" and row.target == 30.0
    assert row.configs is not None and row.configs > 0  # the JSON's configs_evaluated
    assert "considered" in row.note and "0 skipped by bound" in row.note
