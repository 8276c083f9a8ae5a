"""Ctrl-C of calibrate.collectives: one line from rank 0, no traceback from any rank, status 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="runs the torch collectives job")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_SWEEP = ["--ops", "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-n", "2000", "-w", "1",
          "--repeats", "8", "--threads", "1", "--groups", "world"]  # fmt: skip
_LINE = "interrupted: the measurements finished so far are kept in"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", PYTHONPATH=os.getcwd())
    return env


def _ctrl_c_once_rows(command: list[str], out: Path, rows: int) -> subprocess.CompletedProcess[str]:
    """Start ``command`` in a process group of its own (a terminal's job) and send the group
    SIGINT, as Ctrl-C does, once ``rows`` records are written."""
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                           start_new_session=True)  # fmt: skip
    records = out / "collectives.jsonl"
    deadline = time.monotonic() + 120
    while job.poll() is None and time.monotonic() < deadline:
        if records.exists() and records.read_text().count("\n") >= rows:
            break
        time.sleep(0.05)
    assert job.poll() is None, "the sweep ended before it was interrupted"
    os.killpg(job.pid, signal.SIGINT)
    out_text, err = job.communicate(timeout=60)
    return subprocess.CompletedProcess(command, job.returncode, out_text, err)


def test_ctrl_c_of_one_process_is_one_line_and_status_130(tmp_path: Path) -> None:
    done = _ctrl_c_once_rows([sys.executable, "-m", "calibrate.collectives", "--out", str(tmp_path), *_SWEEP],
                             tmp_path, 3)  # fmt: skip
    assert done.returncode == 130
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(_LINE), done.stderr[-2000:]


def test_ctrl_c_under_torchrun_says_one_line_and_no_rank_traceback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "calibrate.collectives", "--out", str(tmp_path), *_SWEEP]  # fmt: skip
    done = _ctrl_c_once_rows(command, tmp_path, 3)
    assert done.stderr.count(_LINE) == 1, done.stderr[-3000:]  # rank 0's line, rank 1 silent
    # torchrun's own launcher may report the signal; no frame of ours (a rank's traceback) appears
    assert "calibrate/" not in done.stderr.replace(str(tmp_path), ""), done.stderr[-3000:]
    assert "RuntimeError" not in done.stderr and "KeyboardInterrupt" not in done.stderr
