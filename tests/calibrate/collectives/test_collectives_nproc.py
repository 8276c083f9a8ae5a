"""``python -m calibrate.collectives --nproc N``: torchrun supervised by our launcher.

Fast: what each rank is given, and ``--nproc`` refused under a launcher. Slow (integration): Ctrl-C
is one line and no traceback from anyone (torchrun's included), a second job on the same --out is
refused while the first runs, and ``kill -9`` of the job leaves no rank behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibrate.collectives.cli import _without_nproc, main
from calibrate.common.procs import SUPERVISOR_ENV
from simcore.errors import TrainsimError

_SWEEP = ["--ops", "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-n", "2000", "-w", "1",
          "--repeats", "8", "--threads", "1", "--groups", "world"]  # fmt: skip
_LINE = "interrupted: the measurements finished so far are kept in"


@pytest.mark.parametrize(
    ("argv", "ranks"),
    [
        (["--nproc", "2", "--out", "r"], ["--out", "r"]),
        (["--out", "r", "--nproc=4", "-e", "1M"], ["--out", "r", "-e", "1M"]),
        (["--out", "r"], ["--out", "r"]),
    ],
)
def test_each_rank_gets_the_arguments_less_nproc(argv: list[str], ranks: list[str]) -> None:
    assert _without_nproc(argv) == ranks


def test_nproc_under_a_launcher_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(TrainsimError, match="--nproc starts its own ranks"):
        main.__wrapped__(["--nproc", "2", "--out", str(tmp_path)])  # type: ignore[attr-defined]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", PYTHONPATH=os.getcwd())
    return env


def _start(out: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "calibrate.collectives", "--nproc", "2", "--out", str(out), *_SWEEP]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)  # fmt: skip


def _wait_rows(job: subprocess.Popen[str], out: Path, rows: int) -> None:
    records = out / "collectives.jsonl"
    deadline = time.monotonic() + 180
    while job.poll() is None and time.monotonic() < deadline:
        if records.exists() and records.read_text().count("\n") >= rows:
            return
        time.sleep(0.05)
    raise AssertionError("the sweep ended (or never wrote) before it was interrupted")


def _ranks_of(pid: int) -> list[int]:
    """Live processes started under the supervisor ``pid`` (they carry its pid in their environment)."""
    found = []
    marker = f"{SUPERVISOR_ENV}={pid}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_of_nproc_is_one_line_and_no_traceback_and_a_second_job_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="runs the torch collectives job")
    job = _start(tmp_path)
    _wait_rows(job, tmp_path, 3)
    second = subprocess.run([sys.executable, "-m", "calibrate.collectives", "--out", str(tmp_path), "--resume"],
                            capture_output=True, text=True, env=_env(), timeout=120, check=False)  # fmt: skip
    assert second.returncode == 2 and f"pid {job.pid}" in second.stderr, second.stderr
    os.killpg(job.pid, signal.SIGINT)  # a terminal's Ctrl-C: the job's process group
    _, err = job.communicate(timeout=90)
    assert job.returncode == 130, err[-3000:]
    assert err.count(_LINE) == 1 and "Traceback" not in err, err[-3000:]


@pytest.mark.integration
@pytest.mark.slow
def test_kill_9_of_nproc_leaves_no_rank_behind(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="runs the torch collectives job")
    job = _start(tmp_path)
    _wait_rows(job, tmp_path, 3)
    assert _ranks_of(job.pid)  # torchrun and its ranks
    job.kill()
    job.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while _ranks_of(job.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ranks_of(job.pid)
