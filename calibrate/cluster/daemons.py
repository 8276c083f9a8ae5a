"""Starting and stopping the cluster's processes: by the PID we started, or by the namespace they live in.

Every daemon runs in the foreground (``-F``/``-D``) as a child of the process that built the
cluster, in its own session (a Ctrl-C at the terminal reaches only the parent, which then tears
down in order) and with a parent-death signal, so even a parent killed with SIGKILL takes its
daemons with it. Job steps are different: ``slurmd`` double-forks ``slurmstepd``, which outlives
it by design, so teardown also stops every process left in the cluster's network namespaces.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simcore.errors import TrainsimError
from simcore.procs import request_parent_death_signal as die_with_parent

__all__ = [
    "ClusterError",
    "Daemon",
    "die_with_parent",
    "log_tail",
    "missing_binaries",
    "namespace_pids",
    "search_path",
    "stop_namespaces",
]

# The daemons and clients the cluster runs, and the Debian packages that ship them.
BINARIES = {"munged": "munge", "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sinfo": "slurm-wlm",
            "sbatch": "slurm-wlm", "scontrol": "slurm-wlm", "srun": "slurm-wlm", "unshare": "util-linux",
            "nsenter": "util-linux"}  # fmt: skip
_TIMEOUT_S = 30


class ClusterError(TrainsimError):
    """The emulated Slurm cluster could not be built, started, or did not do what was asked."""


def search_path() -> str:
    """``PATH`` with the sbin directories the daemons live in, which a user's PATH may lack."""
    dirs = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(dirs + [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin") if d not in dirs])


def missing_binaries() -> str | None:
    """None when every Slurm and munge program is installed, else one line naming the apt packages."""
    missing = [name for name in BINARIES if shutil.which(name, path=search_path()) is None]
    if not missing:
        return None
    packages = sorted({BINARIES[name] for name in missing})
    return (f"the emulated Slurm cluster needs {', '.join(missing)}; install them with "
            f"'apt-get install -y {' '.join(packages)}' (Debian/Ubuntu)")  # fmt: skip


@dataclass(frozen=True)
class Daemon:
    """One foreground daemon we started, its output going to ``log``."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, command: Sequence[str], log: Path, env: Mapping[str, str]) -> Daemon:
        with log.open("ab") as out:
            process = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=dict(env),
                start_new_session=True, preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            )  # fmt: skip
        return cls(name, process, log)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``; only this daemon's own PID."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                self.process.wait(timeout=_TIMEOUT_S)


def namespace_pids(namespace: str) -> list[int]:
    """PIDs of every process in network namespace ``namespace`` (empty when it is gone)."""
    result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                            timeout=_TIMEOUT_S, check=False)  # fmt: skip
    return [int(word) for word in result.stdout.split() if word.isdigit()]


def stop_namespaces(namespaces: Sequence[str], grace_s: float = 2.0) -> list[int]:
    """Stop every process left in ``namespaces`` (SIGTERM, then SIGKILL); returns PIDs that survived.

    slurmstepd ignores SIGTERM, so waiting long for it only delays the SIGKILL it needs.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [pid for name in namespaces for pid in namespace_pids(name)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [pid for name in namespaces for pid in namespace_pids(name)]
        if not pids:
            return []
    return pids


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of ``path``, headed by its name (empty when there is nothing)."""
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").strip()
    if not text:
        return ""
    return f"--- {path.name} (last lines) ---\n" + "\n".join(text.splitlines()[-lines:])
