"""Processes that die with the process that started them (Linux ``PR_SET_PDEATHSIG``).

A launcher killed with SIGKILL (a scheduler's time limit, ``kill -9``, an OOM kill) cannot stop its
children, and a worker left running may block in a collective forever, keep appending records or
keep a namespace alive. Linux lets a child ask to be sent a signal when its parent dies:
``prctl(PR_SET_PDEATHSIG, sig)`` (prctl(2)). The request survives ``execve`` (unless the program is
set-user-ID), so a launcher can make it in the child between fork and exec (``preexec_fn``), or a
worker can make it itself (a process pool's initializer). Written on ctypes: the standard library
has no prctl, and no maintained package is worth a dependency for one system call.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from pathlib import Path

__all__ = ["PR_SET_PDEATHSIG", "die_with_parent", "lineage_pids", "request_parent_death_signal"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def request_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False where it cannot.

    Safe as a ``subprocess`` ``preexec_fn`` (no allocation-heavy work)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)
    return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Have Linux send ``sig`` (SIGKILL) to this process when its parent exits; False where that is
    not possible.

    ``parent_pid`` is the parent as the caller knows it: if it is already gone when the request is
    made (re-parented to init or a subreaper), this process exits at once, as it would have been
    killed a moment later.
    """
    done = request_parent_death_signal(sig)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    return done


def lineage_pids() -> set[str]:
    """This process's pid and its ancestors' (Linux ``/proc``; elsewhere the parent's alone): a
    process whose launcher has died is re-parented, and its launcher's pid leaves this set."""
    pids = {str(os.getpid())}
    pid = os.getppid()
    for _ in range(64):  # a bound: a launcher is a few levels up, never more
        if pid <= 1:
            break
        pids.add(str(pid))
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the command's name: ppid
    return pids
