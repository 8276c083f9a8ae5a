"""A calibration rank stopped by SIGINT / SIGTERM exits 130 with at most one line (rank 0's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from calibrate.common.procs import INTERRUPTED_STATUS

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs POSIX signal masks")

# armed, then blocked in a C call (a lock wait), as a rank is inside a collective
_RANK = """
import sys, threading
from calibrate.common.procs import exit_on_stop_signals
assert exit_on_stop_signals(int(sys.argv[1]), lambda: "interrupted: kept")
print("armed", flush=True)
lock = threading.Lock(); lock.acquire(); lock.acquire()
"""


def _stop(rank: int, sig: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    job = subprocess.Popen([sys.executable, "-c", _RANK, str(rank)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert job.stdout is not None and job.stdout.readline() == "armed\n"
    time.sleep(0.05)
    job.send_signal(sig)
    out, err = job.communicate(timeout=30)
    return subprocess.CompletedProcess(job.args, job.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_rank_zero_says_one_line_and_exits_130(sig: int) -> None:
    done = _stop(0, sig)
    assert done.returncode == INTERRUPTED_STATUS == 130
    assert done.stderr == "interrupted: kept\n"


def test_other_ranks_exit_130_in_silence() -> None:
    done = _stop(1, signal.SIGINT)
    assert (done.returncode, done.stderr) == (130, "")
