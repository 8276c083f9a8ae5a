"""A launcher started by supervise(): its status passed on, Ctrl-C one line and 130, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibrate.common.launcher import TIMEOUT_STATUS, supervise
from calibrate.common.procs import INTERRUPTED_STATUS

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs POSIX process groups")

# A stand-in for torchrun: says it is ready, then on SIGINT / SIGTERM says what a stopped rank 0
# says and prints a traceback of its own, as torchrun's launcher does (or, "ignore": nothing, ever).
_LAUNCHER = """
import os, signal, sys, time
mode, pid_file = sys.argv[1], sys.argv[2]
def stop(signum, frame):
    sys.stderr.write("interrupted: kept\\n")
    sys.stderr.write("Traceback (most recent call last):\\n  SignalException: Process got signal\\n")
    sys.stderr.flush()
    sys.exit(1)
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN if mode == "ignore" else stop)
open(pid_file, "w").write(str(os.getpid()))
sys.stderr.write("ready\\n"); sys.stderr.flush()
while True:
    time.sleep(0.05)
"""

# The wrapper as a command runs it: supervise() in the main thread of a process of its own.
_WRAPPER = """
import sys
import calibrate.common.launcher as launcher
launcher.STOP_GRACE_S = 1.0
sys.exit(launcher.supervise([[sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]]], 60, name="fake"))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _ctrl_c(mode: str, sig: int, tmp_path: Path) -> tuple[int, str, int]:
    """(status, stderr after "ready", launcher pid) of the wrapper stopped as a terminal's Ctrl-C does."""
    pid_file = tmp_path / "launcher.pid"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    job = subprocess.Popen([sys.executable, "-c", _WRAPPER, _LAUNCHER, mode, str(pid_file)],
                           stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)  # fmt: skip
    assert job.stderr is not None and job.stderr.readline() == "ready\n"
    os.killpg(job.pid, sig)  # the terminal's job: the wrapper; the launcher runs in a session of its own
    _, err = job.communicate(timeout=30)
    return job.returncode, err, int(pid_file.read_text())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_passes_the_rank_line_and_swallows_the_launchers_traceback(sig: int, tmp_path: Path) -> None:
    status, err, pid = _ctrl_c("traceback", sig, tmp_path)
    assert (status, err) == (INTERRUPTED_STATUS, "interrupted: kept\n")
    assert not _alive(pid)


def test_a_launcher_that_ignores_the_signal_is_killed_and_the_wrapper_says_one_line(tmp_path: Path) -> None:
    status, err, pid = _ctrl_c("ignore", signal.SIGINT, tmp_path)
    assert (status, err) == (INTERRUPTED_STATUS, "interrupted: fake stopped (SIGINT)\n")
    assert not _alive(pid)


def test_statuses_are_passed_on_and_a_job_past_its_time_is_killed() -> None:
    python = sys.executable
    assert supervise([[python, "-c", "pass"], [python, "-c", "pass"]], 30) == 0
    assert (
        supervise(
            [[python, "-c", "import sys; sys.exit(3)"], [python, "-c", "import time; time.sleep(30)"]], 30
        )
        == 3
    )
    start = time.monotonic()
    assert supervise([[python, "-c", "import time; time.sleep(30)"]], 0.5) == TIMEOUT_STATUS
    assert time.monotonic() - start < 10


def test_output_before_a_signal_passes_unchanged(capfd: pytest.CaptureFixture[str]) -> None:
    script = "import sys; sys.stderr.write('one\\ntwo'); print('out')"
    assert supervise([[sys.executable, "-c", script]], 30) == 0
    captured = capfd.readouterr()
    assert (captured.out, captured.err) == ("out\n", "one\ntwo")


_TRAIN = """
import sys
from calibrate.train.cli import launch_local
from tests.torchrun_helpers import TINY_CNN
sys.exit(launch_local(["--out", sys.argv[1], *TINY_CNN, "--steps", "100000"], 2, 240, via_torchrun=True))
"""


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_of_a_training_job_under_torchrun_is_one_line_and_130(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="runs a real torchrun job")
    out = tmp_path / "train.jsonl"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    job = subprocess.Popen([sys.executable, "-c", _TRAIN, str(out)], stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 180
    while job.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_text().count('"kind": "step"') >= 4:
            break
        time.sleep(0.1)
    assert job.poll() is None, "the job ended before it was interrupted"
    os.killpg(job.pid, signal.SIGINT)
    _, err = job.communicate(timeout=60)
    assert job.returncode == INTERRUPTED_STATUS, err[-3000:]
    assert err.endswith("interrupted: calibrate.train stopped (SIGINT)\n"), err[-3000:]
    assert "Traceback" not in err, err[-3000:]


_COLLECTIVES = """
import sys
from calibrate.common.launcher import supervise
sweep = ["--ops", "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-n", "2000", "-w", "1", "--repeats", "8",
         "--threads", "1", "--groups", "world"]
command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "calibrate.collectives", "--out", sys.argv[1], *sweep]
sys.exit(supervise([command], 240, name="calibrate.collectives"))
"""


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_of_the_collectives_under_torchrun_is_rank_zeros_line_alone(tmp_path: Path) -> None:
    """The issue's case: torchrun's launcher traceback and shutdown log gone, rank 0's line kept."""
    pytest.importorskip("torch", reason="runs a real torchrun job")
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env.update(PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    job = subprocess.Popen([sys.executable, "-c", _COLLECTIVES, str(tmp_path)], stderr=subprocess.PIPE, text=True,
                           env=env, start_new_session=True)  # fmt: skip
    records = tmp_path / "collectives.jsonl"
    deadline = time.monotonic() + 180
    while job.poll() is None and time.monotonic() < deadline:
        if records.exists() and records.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert job.poll() is None, "the sweep ended before it was interrupted"
    os.killpg(job.pid, signal.SIGINT)
    _, err = job.communicate(timeout=60)
    assert job.returncode == INTERRUPTED_STATUS, err[-3000:]
    assert err.count("\n") == 1 and "interrupted: the measurements finished so far are kept in" in err, err
