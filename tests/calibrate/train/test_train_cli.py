"""`python -m calibrate.train`: bad input, the record format, and determinism by seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from calibrate.common.records import read_records
from calibrate.train.cli import config_from_args, main

pytest.importorskip("torch", reason="these tests run the torch calibration jobs")

TINY = ["--model", "cnn", "--width", "4", "--depth", "1", "--image-size", "8", "--batch", "4"]
TINY_TRANSFORMER = [
    "--model",
    "transformer",
    "--width",
    "8",
    "--depth",
    "1",
    "--heads",
    "2",
    "--seq-len",
    "8",
    "--vocab",
    "16",
    "--batch",
    "4",
]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "allreduce-magic"], "unknown strategy 'allreduce-magic'; allowed: ddp, fsdp"),
        (["--steps", "0"], "--steps: 0 is out of range"),
        (["--model", "resnet"], "unknown model 'resnet'"),
        (["--slow-rank", "fast"], "expected RANK:FACTOR"),
        (["--slow-rank", "1:0.5"], "factor >= 1"),
        (["--steps", "ten"], "expected a whole number, got 'ten'"),
    ],
)
def test_bad_arguments_give_one_error_line_and_status_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "r.jsonl"), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "r.jsonl").exists()


def test_config_keeps_the_straggler_and_sizes() -> None:
    config = config_from_args(["--out", "x.jsonl", "--slow-rank", "2:3.5", "--width", "8"])
    assert (config.slow_rank, config.slow_factor, config.width) == (2, 3.5, 8)
    assert "resume" not in config.identity()


def _run_one(out: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "calibrate.train", "--out", str(out), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.integration
def test_parameter_server_needs_more_than_one_process(tmp_path: Path) -> None:
    done = _run_one(tmp_path / "r.jsonl", "--strategy", "ps-sync", *TINY)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: ps-sync with --ps-ranks 1 needs at least 2 processes (servers + at least one worker); "
        "got 1; run under torchrun --nproc-per-node"
    ]


def _losses(records: list[dict[str, Any]]) -> list[float]:
    return [r["loss"] for r in records if r["kind"] == "step"]


@pytest.mark.integration
@pytest.mark.slow
def test_single_process_run_is_well_formed_and_deterministic_by_seed(tmp_path: Path) -> None:
    runs = {}
    for name, seed in (("a", "1"), ("b", "1")):
        out = tmp_path / f"{name}.jsonl"
        done = _run_one(
            out, *TINY_TRANSFORMER, "--steps", "4", "--seed", seed, "--eval-every", "2", "--threads", "1"
        )
        assert done.returncode == 0, done.stderr
        runs[name] = read_records(out)
    records = runs["a"]
    assert [r["kind"] for r in records] == ["provenance"] + ["step"] * 4 + ["summary"]
    head = records[0]
    assert head["config"]["strategy"] == "ddp" and head["threads_per_rank"] == 1
    assert head["config"]["model"] == "transformer" and head["model_description"]["blocks"] == 1
    assert head["model_description"]["params"] == records[1]["model_params"]
    assert {"torch", "hostname", "argv", "date"} <= head.keys()
    steps = records[1:-1]
    assert [r["step"] for r in steps] == [0, 1, 2, 3]
    assert [("accuracy" in r) for r in steps] == [False, True, False, True]
    assert steps[0]["memory_source"] == "mem_tracker" and steps[1]["memory_source"] == "tracked_tensors"
    assert all(r["peak_memory_bytes"] > 0 and r["step_time_s"] > 0 for r in steps)
    assert records[-1]["final_accuracy"] == steps[-1]["accuracy"]
    assert _losses(runs["a"]) == _losses(runs["b"])  # bit for bit
    assert [r.get("accuracy") for r in runs["a"]] == [r.get("accuracy") for r in runs["b"]]
