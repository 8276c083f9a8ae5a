"""A killed planner leaves no pool workers behind (they ask Linux to kill them with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_pool_workers_die_with_a_killed_planner(sig: int) -> None:
    command = [sys.executable, "-m", "experiments.plan", "--model", "llama2-70b", "--cluster", "hgx-h100",
               "--gpus", "64,128", "--seq-len", "4096", "--workers", "2", "--quiet"]  # fmt: skip
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = _children(job.pid)
        assert job.poll() is None and len(workers) >= 2, "the planner ended (or never forked) before the kill"
        job.send_signal(sig)
        job.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _alive(w)]
    finally:
        if job.poll() is None:
            job.kill()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"pool workers {left} outlived the planner"
