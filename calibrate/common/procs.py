"""Calibration jobs' processes that die with their launcher (see :mod:`simcore.procs`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from simcore.procs import PR_SET_PDEATHSIG, die_with_parent, lineage_pids

__all__ = [
    "INTERRUPTED_STATUS",
    "PR_SET_PDEATHSIG",
    "STOP_SIGNALS",
    "SUPERVISOR_ENV",
    "die_with_launcher",
    "die_with_parent",
    "exit_on_stop_signals",
]

INTERRUPTED_STATUS = 130  # 128 + SIGINT, what a shell reports for a job stopped by Ctrl-C
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# set by :func:`calibrate.common.launcher.supervise` to its pid: a rank whose supervisor is gone exits
SUPERVISOR_ENV = "TRAINSIM_SUPERVISOR_PID"


def die_with_launcher() -> bool:
    """Under torchrun, have Linux SIGKILL this worker when the launcher dies; False elsewhere.

    torchrun starts each worker in a session of its own, so killing the launcher (``kill -9``, a
    scheduler's time limit) would otherwise leave workers running, appending records or blocked in
    a collective forever, and a later ``--resume`` would run beside them.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    parent = os.getppid()
    done = die_with_parent(parent)
    # The launcher may have died before this rank got here (the request covers only the parent it
    # has now): re-parented to init, or its supervisor (``--nproc``) no longer among its ancestors.
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if parent == 1 or (supervisor is not None and supervisor not in lineage_pids()):
        os._exit(1)
    return done


def exit_on_stop_signals(rank: int, message: Callable[[], str]) -> bool:
    """On SIGINT or SIGTERM, exit at once with :data:`INTERRUPTED_STATUS`, rank 0 saying
    ``message()`` in one line, every other rank nothing; False where it cannot be arranged.

    Ctrl-C under torchrun reaches every rank (or the launcher passes SIGTERM on): a rank blocked in
    a collective would run a Python handler only once the call returns, that is once its peer has
    gone and the call has failed, with a traceback. So the signals are blocked in this thread and
    in every thread started after (call this before torch starts its own), and one thread waits for
    them (``sigwait``), outside any collective. The records already written are kept: each was
    flushed and fsynced when written, and a torn last line is dropped by the next reader.
    Call from the main thread.
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return False

    def stop() -> None:
        if rank == 0:
            with contextlib.suppress(OSError):  # stderr closed: the status still tells
                print(message(), file=sys.stderr, flush=True)
        os._exit(INTERRUPTED_STATUS)

    def handler(signum: int, frame: FrameType | None) -> None:  # a signal sent to an unmasked thread
        stop()

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def wait() -> None:
        signal.sigwait(STOP_SIGNALS)
        stop()

    threading.Thread(target=wait, name="stop-signals", daemon=True).start()
    return True
