"""``python -m experiments.validate --quick``: the whole pipeline on real gloo runs of this machine.

Calibrates (collectives + compute microbenchmarks), trains a tiny CNN under DDP and a synchronous
parameter server on two processes, predicts both and writes the report. It fails when any stage
breaks; the numbers it checks come from the runs' own records, never from constants.
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys

import pytest

from calibrate.common.records import read_records
from tests.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_validation_runs_end_to_end(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "quick"
    result = subprocess.run(
        [sys.executable, "-m", "experiments.validate", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Overall step-time MAPE:" in result.stdout
    assert (out / "profile.json").exists()
    report = (out / "report.md").read_text()
    assert report.splitlines()[2].startswith("**Overall step-time MAPE: ")
    with (out / "comparison.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["strategy"] for r in rows} == {"ddp", "ps-sync"}
    for row in rows:
        records = read_records(out / "runs" / f"{row['key']}.jsonl")
        steps = [
            r
            for r in records
            if r.get("kind") == "step" and not r.get("warmup") and r.get("role") != "server"
        ]
        assert steps, f"{row['key']}: no timed steps recorded"
        assert float(row["measured_ms"]) > 0 and float(row["predicted_ms"]) > 0
        # The reported measurement is derived from the run's own records (never a constant).
        per_step: dict[int, float] = {}
        for record in steps:
            per_step[record["step"]] = max(per_step.get(record["step"], 0.0), record["step_time_s"])
        assert float(row["measured_ms"]) == pytest.approx(
            1e3 * statistics.median(per_step.values()), abs=0.01
        )
