"""Calibration jobs' processes that die with their launcher (see :mod:`simcore.procs`)."""

from __future__ import annotations

import os

from simcore.procs import PR_SET_PDEATHSIG, die_with_parent

__all__ = ["PR_SET_PDEATHSIG", "die_with_launcher", "die_with_parent"]


def die_with_launcher() -> bool:
    """Under torchrun, have Linux SIGKILL this worker when the launcher dies; False elsewhere.

    torchrun starts each worker in a session of its own, so killing the launcher (``kill -9``, a
    scheduler's time limit) would otherwise leave workers running, appending records or blocked in
    a collective forever, and a later ``--resume`` would run beside them.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    return die_with_parent(os.getppid())
