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


def kill_after_step(job: subprocess.Popen[bytes], out: Path, step: int, timeout_s: float = 120) -> bool:
    """SIGKILL the whole job as soon as rank 0 has recorded ``step``; whether it was still running
    then (False: it had finished or died, and the kill tested nothing)."""
    deadline = time.monotonic() + timeout_s
    running = False
    try:
        while time.monotonic() < deadline and job.poll() is None:
            done = [r["step"] for r in read_records(out) if r.get("kind") == "step" and r["rank"] == 0]
            if done and max(done) >= step:
                break
            time.sleep(0.05)
    finally:
        running = job.poll() is None
        if running:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    return running


def steps_by_rank(records: list[dict[str, Any]]) -> dict[tuple[int, int], list[float]]:
    losses: dict[tuple[int, int], list[float]] = {}
    for record in records:
        if record["kind"] == "step":
            losses.setdefault((record["rank"], record["step"]), []).append(record["loss"])
    return losses


def test_killed_job_resumes_from_its_checkpoint_with_identical_steps(tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    # 24 steps, killed after step 9: rank 0 sleeps 15x its compute, so 14 slow steps remain
    assert kill_after_step(start_job(out), out, step=9), "the job ended before it was killed"
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
    assert all(len(values) <= 2 for values in losses.values())
    repeated = [key for key, values in losses.items() if len(values) == 2]
    assert all(resumed_from <= key[1] <= recorded + 1 for key in repeated)  # only steps after the checkpoint
    for key in repeated:  # the checkpoint restored parameters and momentum exactly
        assert losses[key][0] == losses[key][1], key
    summaries = [r for r in records if r["kind"] == "summary"]
    assert sorted(r["rank"] for r in summaries) == [0, 1]
    assert all(r["steps_recorded"] == 24 for r in summaries)  # the reader's view: each step once

    assert len(run_job(out, [*ARGS, "--resume"], 2)) == len(records)  # a finished run is not run again


@pytest.mark.integration
def test_resume_says_what_it_found_and_the_torn_record_it_dropped(tmp_path: Path) -> None:
    """A run cut after step 3 (its last record torn, its step-6 checkpoint never written) resumes
    from the step-4 checkpoint, saying so, and ends with every step once."""
    out = tmp_path / "train.jsonl"
    argv = [*TINY_CNN, "--steps", "6", "--checkpoint-every", "2", "--threads", "1", "--out", str(out)]
    command = [sys.executable, "-m", "calibrate.train", *argv]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    (checkpoints,) = out.with_suffix(".ckpt").iterdir()
    (checkpoints / "step6.rank0.pt").unlink()
    lines = out.read_text().splitlines(keepends=True)  # provenance, steps 0..5, summary
    out.write_text("".join(lines[:5]) + lines[5][:30])  # steps 0..3 kept, step 4 half-written
    resumed = subprocess.run([*command, "--resume"], check=True, capture_output=True, text=True, timeout=120)
    said = resumed.stderr.splitlines()
    assert [line for line in said if line.startswith(("warning:", "resume:"))] == [
        f"warning: {out}:6: dropped a torn record (30 bytes, half-written when the job was killed); "
        "it is measured again",
        f"resume: run {checkpoints.name}: 4 step record(s) already in {out} (rank 0 to step 3); "
        "continuing from the checkpoint after step 3; 0 step(s) after it run again (readers keep the last)",
    ]
    steps = [r["step"] for r in read_records(out) if r["kind"] == "step"]
    assert steps == [0, 1, 2, 3, 4, 5]
    assert read_records(out)[-1]["steps_recorded"] == 6
