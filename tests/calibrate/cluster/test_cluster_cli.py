"""``python -m calibrate.cluster`` for real (root, Debian's slurm-wlm and munge): up, a command, and
nothing left afterwards, whether the command succeeds, the start fails, or the cluster is
interrupted (Ctrl-C, SIGTERM) or killed (SIGKILL, then ``--cleanup``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from calibrate.cluster.emulated import NETNS_ETC, cluster_unavailable
from tests.calibrate.cluster.leftovers import namespace_inodes, processes_in

REASON = cluster_unavailable()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"real Slurm: {REASON}"), pytest.mark.root,
              pytest.mark.slow]  # fmt: skip


def _cluster(*argv: str) -> list[str]:
    return [sys.executable, "-m", "calibrate.cluster", *argv]


def _namespaces(pid: int) -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(f"trainsim-{pid}-slurm")]


def _daemons(pid: int) -> list[int]:
    """PIDs of the munged, slurmctld and slurmd started by cluster process ``pid`` (their command
    lines name its state directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"trainsim-{pid}-slurm".encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _leftovers(pid: int, inodes: set[int]) -> list[object]:
    files = [
        *NETNS_ETC.glob(f"trainsim-{pid}-*"),
        *Path(tempfile.gettempdir()).glob(f"trainsim-{pid}-slurm*"),
    ]
    return [*_namespaces(pid), *processes_in(inodes), *_daemons(pid), *files]


def _start(tmp_path: Path, command: str) -> tuple[subprocess.Popen[str], set[int]]:
    """Start a cluster running ``command``; once it is up, the inodes of its namespaces."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen(_cluster("--nodes", "2", "--", "sh", "-c", f"touch {ready}; {command}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ready.exists() and proc.poll() is None:
        time.sleep(0.1)
    assert ready.exists(), proc.communicate(timeout=30)
    return proc, namespace_inodes(_namespaces(proc.pid))


def test_command_runs_on_the_cluster_and_everything_goes_with_it(tmp_path: Path) -> None:
    # a job still running when the command exits
    script = (
        "sinfo --noheader --Node --format='%N %t'; srun --nodes=2 hostname | sort; "
        "sbatch --output=/dev/null --wrap 'srun sleep 300' >/dev/null; sleep 1; exit 3"
    )
    proc, inodes = _start(tmp_path, script)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert out.split("\n")[:4] == ["node0 idle", "node1 idle", "node0", "node1"]
    assert "slurm cluster up: node0 10.213.0.1, node1 10.213.0.2" in err
    assert _leftovers(proc.pid, inodes) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_tears_down(tmp_path: Path, sig: signal.Signals) -> None:
    proc, inodes = _start(tmp_path, "sbatch --output=/dev/null --wrap 'srun sleep 300' >/dev/null; sleep 300")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert _leftovers(proc.pid, inodes) == []


def test_failed_start_shows_the_daemons_logs_and_tears_down() -> None:
    proc = subprocess.Popen(_cluster("--nodes", "2", "--timeout", "0", "--", "true"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    first, *logs = err.splitlines()
    assert first.startswith("error: the nodes did not all become idle within 0 s")
    assert "--- slurmctld.log (last lines) ---" in logs
    assert _namespaces(proc.pid) == [] and _daemons(proc.pid) == []


def test_killed_cluster_takes_its_daemons_and_cleanup_removes_the_rest(tmp_path: Path) -> None:
    proc, inodes = _start(tmp_path, "sleep 300")
    assert _daemons(proc.pid)
    proc.kill()
    proc.wait(timeout=30)  # not communicate(): the command's children still hold its pipes
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _daemons(proc.pid):  # the parent-death signal
        time.sleep(0.2)
    assert _daemons(proc.pid) == [] and _namespaces(proc.pid)
    cleanup = subprocess.run(_cluster("--cleanup"), capture_output=True, text=True, timeout=120)
    assert cleanup.returncode == 0, cleanup.stderr
    assert _leftovers(proc.pid, inodes) == []
