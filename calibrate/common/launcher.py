"""Start a launcher (torchrun) as a child job and stop it cleanly on Ctrl-C or SIGTERM.

torchrun turns SIGINT / SIGTERM into an exception and prints its traceback (torch's code, not
ours) after the ranks have stopped. Started by :func:`supervise`, the launcher runs in a session of
its own, so a terminal's Ctrl-C reaches only this process, which then:

1. passes the signal on to the launcher (torchrun stops its workers with the same signal; each
   calibration rank exits 130, rank 0 saying one ``interrupted: ...`` line);
2. from then on lets through only those ``interrupted:`` lines of the job's stderr, swallowing the
   launcher's traceback and its shutdown log;
3. after :data:`STOP_GRACE_S` kills what is left of the job's process group (the ranks die with
   their launcher, see :func:`calibrate.common.procs.die_with_launcher`);
4. returns :data:`~calibrate.common.procs.INTERRUPTED_STATUS` (130), saying one line of its own if
   no rank said one.

Output before the signal is passed through unchanged, line by line. Without a main thread to
install signal handlers in (a caller's worker thread), the signals are left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import IO

from calibrate.common.procs import INTERRUPTED_STATUS, STOP_SIGNALS, SUPERVISOR_ENV
from simcore.procs import request_parent_death_signal

__all__ = ["STOP_GRACE_S", "TIMEOUT_STATUS", "supervise"]

STOP_GRACE_S = 20.0  # a stopped launcher's time to stop its workers before its group is killed
TIMEOUT_STATUS = 124  # what ``timeout`` reports for a job it killed
_RANK_LINE = re.compile(rb"^(\[rank\d+\]: ?)?interrupted:")  # a stopped calibration rank's one line
_POLL_S = 0.05


class _Stderr:
    """Copies the job's stderr to ours line by line; after :meth:`stop`, only a rank's one line."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self._stopping = threading.Event()
        self.rank_line_seen = False
        self._thread = threading.Thread(target=self._copy, name="launcher-stderr", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _copy(self) -> None:
        sink = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        for line in iter(self._source.readline, b""):
            if self._stopping.is_set():
                if self.rank_line_seen or not _RANK_LINE.match(line):
                    continue
                self.rank_line_seen = True
            with contextlib.suppress(OSError, ValueError):  # our stderr closed: keep draining the pipe
                if sink is not None:
                    sink.write(line)
                    sink.flush()
                else:
                    sys.stderr.write(line.decode(errors="replace"))
        with contextlib.suppress(OSError):
            self._source.close()


@contextlib.contextmanager
def _caught_stop_signals(received: list[int]) -> Iterator[bool]:
    """SIGINT / SIGTERM append to ``received`` instead of raising, while inside; whether armed."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield True
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _kill_groups(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:  # each runs in a session of its own: kill every group still alive
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _stop(
    procs: Sequence[subprocess.Popen[bytes]], signum: int, copiers: Sequence[_Stderr], name: str
) -> int:
    for copier in copiers:
        copier.stop()
    for proc in procs:  # a launcher stops its workers with the same signal; a rank stops itself
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(proc.poll() is None for proc in procs) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    _kill_groups(procs)
    for copier in copiers:
        copier.join(STOP_GRACE_S)
    if not any(copier.rank_line_seen for copier in copiers):
        with contextlib.suppress(OSError, ValueError):
            print(f"interrupted: {name} stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    return INTERRUPTED_STATUS


def supervise(
    commands: Sequence[Sequence[str]],
    timeout_s: float,
    *,
    envs: Sequence[Mapping[str, str]] | None = None,
    name: str = "the job",
) -> int:
    """Run ``commands`` (a launcher, or the ranks of one job) each in a session of its own.

    0 when every process succeeds; else the first failure's status, after killing the others (a
    rank that failed leaves its peers waiting in a collective); :data:`TIMEOUT_STATUS` after
    killing all once ``timeout_s`` has passed; :data:`~calibrate.common.procs.INTERRUPTED_STATUS`
    when this process got SIGINT or SIGTERM (see the module docstring; ``name`` is what the one
    line calls the job). ``envs``: one environment per command (default: this process's).
    """
    received: list[int] = []
    procs: list[subprocess.Popen[bytes]] = []
    copiers: list[_Stderr] = []
    with _caught_stop_signals(received):
        try:
            for i, command in enumerate(commands):
                env = {**(os.environ if envs is None else envs[i]), SUPERVISOR_ENV: str(os.getpid())}
                proc = subprocess.Popen(  # dies with this process, even when it is SIGKILLed
                    list(command), start_new_session=True, env=env, stderr=subprocess.PIPE,
                    preexec_fn=request_parent_death_signal,
                )  # fmt: skip
                procs.append(proc)
                assert proc.stderr is not None  # stderr=PIPE
                copiers.append(_Stderr(proc.stderr))
            deadline = time.monotonic() + timeout_s
            status = 0
            while not received:
                codes = [proc.poll() for proc in procs]
                status = next((code for code in codes if code), 0)
                if status or all(code == 0 for code in codes):
                    break
                if time.monotonic() >= deadline:
                    status = TIMEOUT_STATUS
                    break
                time.sleep(_POLL_S)
            if received:
                return _stop(procs, received[0], copiers, name)
            return status
        finally:
            _kill_groups(procs)  # also on an exception in this process: nothing left behind
            for copier in copiers:
                copier.join(5.0)
