"""Real ``calibrate.train`` jobs for the integration tests: a tiny model and a launch that must succeed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calibrate.common.records import read_records
from calibrate.train.cli import launch_local

__all__ = ["TINY_CNN", "run_job"]

# The smallest CNN job (4 channels, one block, 8x8 images, batch 8): seconds per run on a shared CPU.
TINY_CNN = ["--model", "cnn", "--width", "4", "--depth", "1", "--image-size", "8", "--batch", "8"]


def run_job(out: Path, argv: list[str], nproc: int, via_torchrun: bool = False) -> list[dict[str, Any]]:
    """Run ``calibrate.train`` with ``argv`` on ``nproc`` local processes writing to ``out``; its records.

    Fails the test unless the job exits 0 within 150 s.
    """
    status = launch_local(["--out", str(out), *argv], nproc=nproc, timeout_s=150, via_torchrun=via_torchrun)
    assert status == 0, f"calibrate.train exited with {status}"
    return read_records(out)
