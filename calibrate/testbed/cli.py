"""An emulated cluster on one Linux machine: one rank per network namespace, over shaped links.

    sudo python -m calibrate.testbed --nodes 4 --bandwidth 1Gbit/s --delay 100us -- \\
        calibrate.collectives --out runs/testbed -e 1M

builds ``--nodes`` namespaces joined through a bridge by veth links of the given rate and one-way
delay (see :mod:`calibrate.testbed.net`), then runs the job once per namespace with the variables
torchrun would set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``,
``MASTER_ADDR`` = node 0's address, ``MASTER_PORT``) and ``GLOO_SOCKET_IFNAME=eth0``, so each rank
is a node of its own and every collective crosses the emulated fabric. Rank 0 prints to this
terminal; the other ranks' output is shown if the job fails. The namespaces are always removed
afterwards: on success, on failure, on timeout, on Ctrl-C and on SIGTERM/SIGHUP. A testbed killed
with SIGKILL cannot clean up: its ranks die with it (each asks Linux for SIGKILL when the testbed
exits, ``PR_SET_PDEATHSIG``), the next start removes the namespaces it left (and says so), and
``--cleanup`` kills whatever still runs in the namespaces it left,
removes them, and says what it removed and what it could not (with the processes still inside).

A calibration job's options and ``--out`` are checked once, here, before any namespace is made
(:mod:`calibrate.slurm.preflight`), so a bad one is one error line, not one per rank. Needs root
and iproute2. Only private addresses (10.213.0.x) are used, and only inside the
namespaces the testbed creates.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from calibrate.common.procs import die_with_parent
from calibrate.slurm.preflight import JOBS, check_job
from calibrate.testbed.net import (
    LinkShape,
    NamespaceCleanup,
    Testbed,
    TestbedError,
    can_create_namespaces,
    clean_namespace,
    testbed_namespaces,
)
from simcore.cliargs import Parser, int_range
from simcore.errors import TrainsimError, cli_entry
from simcore.units import parse_bandwidth, parse_time

__all__ = ["cleanup", "main", "rank_environment", "run_job", "signals_unwind"]

# One-way: intercontinental links are about 0.1 s; ten seconds is a typo, not a network.
MAX_DELAY_S = 10.0
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "GROUP_RANK", "TORCHELASTIC_RUN_ID")  # fmt: skip


def rank_environment(testbed: Testbed, rank: int, port: int, threads: int) -> dict[str, str]:
    """The environment torchrun would give ``rank`` if each namespace were a node of one GPU/CPU."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("SLURM_")}
    env.update(
        RANK=str(rank), WORLD_SIZE=str(testbed.nodes), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR=testbed.address(0), MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="eth0",
        NCCL_SOCKET_IFNAME="eth0", OMP_NUM_THREADS=str(threads),
    )  # fmt: skip
    return env


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the ranks we started (their whole process groups), then kill what lingers."""
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _show_logs(logs: Path, nodes: int) -> None:
    for rank in range(nodes):
        text = (
            (logs / f"rank{rank}.log").read_text(errors="replace")
            if (logs / f"rank{rank}.log").exists()
            else ""
        )
        if text.strip():
            tail = "\n".join(text.splitlines()[-20:])
            print(f"--- rank {rank} (last lines) ---\n{tail}", file=sys.stderr)


def run_job(testbed: Testbed, job: list[str], *, port: int, threads: int, timeout_s: float) -> int:
    """Run ``python -m <job>`` once per namespace; the first failing rank's status, else 0."""
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="trainsim-testbed-") as tmp:
        logs = Path(tmp)
        try:
            for rank in range(testbed.nodes):
                log = (logs / f"rank{rank}.log").open("wb")
                command = ["ip", "netns", "exec", testbed.namespace(rank), sys.executable, "-m", *job]
                # A session of its own (a terminal's Ctrl-C reaches only the testbed, which stops the ranks
                # in order), and death with the testbed should it be killed without a chance to stop them.
                processes.append(subprocess.Popen(
                    command, env=rank_environment(testbed, rank, port, threads), start_new_session=True,
                    stdout=None if rank == 0 else log, stderr=log,
                    preexec_fn=functools.partial(die_with_parent, os.getpid()),
                ))  # fmt: skip
                log.close()
            status = _wait(processes, timeout_s)
            if status != 0:
                _show_logs(logs, testbed.nodes)
            return status
        finally:
            _stop(processes)


def _wait(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        codes = [p.poll() for p in processes]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            return int(failed[0])  # the others would wait for it forever
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)
    raise TestbedError(f"the job did not finish within --timeout {timeout_s:g} s; all ranks were stopped")


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception, so teardown in ``finally`` runs as on Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _typed(convert: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type whose error keeps the converter's one-line message."""

    def parse(text: str) -> float:
        try:
            return convert(text)
        except TrainsimError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _delay(text: str) -> float:
    delay = parse_time(text)
    if delay > MAX_DELAY_S:
        raise TrainsimError(f"{text!r} is more than the {MAX_DELAY_S:g} s allowed")
    return delay


def _timeout(text: str) -> float:
    seconds = parse_time(text, allow_zero=False)
    if not math.isfinite(seconds):
        raise TrainsimError(f"{text!r} is not a finite number of seconds")
    return seconds


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m calibrate.testbed", description=__doc__.split("\n")[0],
                                usage="%(prog)s --nodes N --bandwidth RATE [--delay TIME] -- JOB_MODULE [JOB ARGS...]")  # fmt: skip
    p.add_argument("--nodes", type=int_range(2, 250), default=2, help="namespaces, one rank each")
    p.add_argument("--bandwidth", type=_typed(parse_bandwidth), default="1Gbit/s",
                   help="rate of each node's link, each direction")  # fmt: skip
    p.add_argument("--delay", type=_typed(_delay), default="0",
                   help=f"one-way delay of each link, e.g. 100us, at most {MAX_DELAY_S:g} s (needs netem)")  # fmt: skip
    p.add_argument("--port", type=int_range(1, 65535), default=29500, help="rendezvous port on node 0")
    p.add_argument("--threads", type=int_range(1, 4096), default=1, help="OMP_NUM_THREADS per rank")
    p.add_argument(
        "--timeout", type=_typed(_timeout), default="1800", help="stop the job after this many seconds"
    )
    p.add_argument(
        "--cleanup", action="store_true", help="only remove namespaces of killed testbeds, then exit"
    )
    p.add_argument("job", nargs=argparse.REMAINDER, help="after --: the job module and its arguments")
    args = p.parse_args(argv)
    args.job = [a for a in args.job if a != "--"]
    if args.job[:1] == ["-m"]:
        args.job = args.job[1:]
    if not args.job and not args.cleanup:
        raise TestbedError("no job given; add it after --, e.g. -- calibrate.collectives --out runs/ -e 1M")
    return args


def _cleanup_line(result: NamespaceCleanup) -> str:
    killed = (
        f"; killed {len(result.killed)} process(es) inside: {_pids(result.killed)}" if result.killed else ""
    )
    if result.ok:
        return f"removed {result.name}{killed}"
    left = f"; still inside: {_pids(result.left)}" if result.left else ""
    why = result.error or "its name is gone but processes keep the namespace alive"
    return f"could not remove {result.name}: {why}{killed}{left}"


def _pids(pids: tuple[int, ...]) -> str:
    return "pid " + ", ".join(str(p) for p in pids)


def cleanup() -> int:
    """Remove the namespaces of testbeds that are gone, killing what still runs inside; 0 when all
    went, 1 when some could not be removed (each named, with the processes still inside)."""
    stale, live = testbed_namespaces()
    results = [clean_namespace(name) for name in stale]
    for result in results:
        print(_cleanup_line(result), file=sys.stdout if result.ok else sys.stderr)
    owners = sorted({name.split("-")[1] for name in live})
    if owners:
        print(f"left {len(live)} namespace(s) of running testbed(s) alone (pid {', '.join(owners)})")
    failed = [r for r in results if not r.ok]
    if not stale:
        print("no namespaces of stopped testbeds (trainsim-<pid>-*) found; nothing to remove")
    else:
        print(f"removed {len(results) - len(failed)} of {len(results)} stale namespace(s)")
    return 1 if failed else 0


def _remove_stale() -> None:
    """Namespaces a killed testbed left (its launcher got SIGKILL) are removed at the next start,
    saying so; what cannot be removed is named, with ``--cleanup`` to retry."""
    stale, _ = testbed_namespaces()
    if not stale:
        return
    results = [clean_namespace(name) for name in stale]
    removed = [r.name for r in results if r.ok]
    if removed:
        print(f"testbed: removed {len(removed)} namespace(s) left by killed testbeds: {', '.join(removed)}")
    for result in results:
        if not result.ok:
            print(f"warning: {_cleanup_line(result)}; run --cleanup as root to retry", file=sys.stderr)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    reason = can_create_namespaces()
    if reason is not None:
        raise TestbedError(reason)
    if args.cleanup:
        return cleanup()
    if args.job[0] in JOBS:  # the job's own options and --out, once, before any namespace exists
        check_job(args.job[0], args.job[1:])
    _remove_stale()
    testbed = Testbed(args.nodes, LinkShape(args.bandwidth, args.delay))
    print(f"testbed: {args.nodes} nodes, {args.bandwidth * 8 / 1e9:g} Gbit/s links, delay {args.delay * 1e6:g} us, "
          f"namespaces {testbed.tag}-*", flush=True)  # fmt: skip
    with signals_unwind():
        try:
            testbed.create()
            return run_job(testbed, args.job, port=args.port, threads=args.threads, timeout_s=args.timeout)
        finally:
            left = testbed.destroy()
            if left:
                print(f"warning: could not remove namespaces {left}; run --cleanup as root", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
