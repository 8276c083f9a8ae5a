"""experiments.what_if's rank spread: N GPUs compute at the expected slowest of N (on by default),
--no-rank-spread turns it off, and a --straggler run (explicit per-rank speeds) never adds it."""

from __future__ import annotations

import json

import pytest

from experiments.what_if.cli import main
from simcore.compute.rank_spread import slowest_rank_time_factor

SMALL = [
    "--model", "llama2-7b", "--cluster", "hgx-h100", "--gpus", "8", "--seq-len", "1024",
    "--global-batch", "16", "--micro-batch", "1", "--strategies", "ddp", "--quiet", "--format", "json",
]  # fmt: skip


def _step_s(argv: list[str], capsys: pytest.CaptureFixture[str]) -> float:
    assert main([*SMALL, *argv]) == 0
    document = json.loads(capsys.readouterr().out)
    records = document["records"] if isinstance(document, dict) else document
    return float(records[-1]["step_time_s"])


def test_eight_gpus_compute_at_the_slowest_of_eight(capsys: pytest.CaptureFixture[str]) -> None:
    spread, median = _step_s([], capsys), _step_s(["--no-rank-spread"], capsys)
    # compute stretches by 1 / (1 - 0.0148 x 1.4236); communication does not
    assert median < spread <= median * slowest_rank_time_factor(8) + 1e-12


def test_explicit_stragglers_replace_the_spread(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--straggler", "3:1.5"]
    assert _step_s(argv, capsys) == pytest.approx(_step_s([*argv, "--no-rank-spread"], capsys), rel=1e-12)
