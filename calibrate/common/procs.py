"""Processes that die with the process that started them (Linux ``PR_SET_PDEATHSIG``).

A launcher killed with SIGKILL (a scheduler's time limit, ``kill -9``, an OOM kill) cannot stop its
children, and a rank left running may block in a collective forever or keep a namespace alive. Linux
lets a child ask to be sent a signal when its parent dies: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
(prctl(2)). The request survives ``execve`` (unless the program is set-user-ID), so a launcher can
make it in the child between fork and exec (``preexec_fn``), or a worker can make it itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

__all__ = ["PR_SET_PDEATHSIG", "die_with_launcher", "die_with_parent"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> bool:
    """Have Linux SIGKILL this process when its parent exits; False where that is not possible.

    ``parent_pid`` is the parent as the caller knows it: if it is already gone when the request is
    made (re-parented to init or a subreaper), this process exits at once, as it would have been
    killed a moment later. Safe as a ``subprocess`` ``preexec_fn`` (no allocation-heavy work).
    """
    if not sys.platform.startswith("linux"):
        return False
    done = False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        done = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    return done


def die_with_launcher() -> bool:
    """Under torchrun, have Linux SIGKILL this worker when the launcher dies; False elsewhere.

    torchrun starts each worker in a session of its own, so killing the launcher (``kill -9``, a
    scheduler's time limit) would otherwise leave workers running, appending records or blocked in
    a collective forever, and a later ``--resume`` would run beside them.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    return die_with_parent(os.getppid())
