"""A training job killed mid-way keeps a readable file, and ``--resume`` continues it exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from calibrate.common.records import read_records
from tests.torchrun_helpers import TINY_CNN, run_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# rank 0 sleeps 15x its compute every step, so the job is slow enough to be killed mid-way
ARGS = [
    *TINY_CNN,
    "--strategy",
    "ddp",
    "--steps",
    "24",
    "--checkpoint-every",
    "4",
    "--eval-every",
    "8",
    "--slow-rank",
    "0:15",
]


def start_job(out: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "calibrate.train",
        "--out",
        str(out),
        *ARGS,
    ]
    return subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def kill_after_step(job: subprocess.Popen[bytes], out: Path, step: int, timeout_s: float = 120) -> None:
    """SIGKILL the whole job as soon as rank 0 has recorded ``step``."""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and job.poll() is None:
            done = [r["step"] for r in read_records(out) if r.get("kind") == "step" and r["rank"] == 0]
            if done and max(done) >= step:
                break
            time.sleep(0.05)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)


def steps_by_rank(records: list[dict[str, Any]]) -> dict[tuple[int, int], list[float]]:
    losses: dict[tuple[int, int], list[float]] = {}
    for record in records:
        if record["kind"] == "step":
            losses.setdefault((record["rank"], record["step"]), []).append(record["loss"])
    return losses


def test_killed_job_resumes_from_its_checkpoint_with_identical_steps(tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    kill_after_step(start_job(out), out, step=9)
    killed = read_records(out)  # readable even if the last line was torn by the kill
    assert killed[0]["kind"] == "provenance"
    assert not any(r["kind"] == "summary" for r in killed), "the job finished before it could be killed"
    recorded = max(r["step"] for r in killed if r["kind"] == "step")
    assert 9 <= recorded < 23

    records = run_job(out, [*ARGS, "--resume"], 2)
    heads = [r for r in records if r["kind"] == "provenance"]
    assert len(heads) == 2 and heads[0]["run_id"] == heads[1]["run_id"]
    resumed_from = heads[1]["resumed_from_step"]
    assert resumed_from % 4 == 0 and 8 <= resumed_from <= recorded + 1
    losses = steps_by_rank(records)
    assert sorted(losses) == [(rank, step) for rank in (0, 1) for step in range(24)]
    repeated = [key for key, values in losses.items() if len(values) == 2]
    assert all(key[1] >= resumed_from for key in repeated)
    for key in repeated:  # the checkpoint restored parameters and momentum exactly
        assert losses[key][0] == losses[key][1], key
    assert sorted(r["rank"] for r in records if r["kind"] == "summary") == [0, 1]

    assert len(run_job(out, [*ARGS, "--resume"], 2)) == len(records)  # a finished run is not run again
