"""An emulated cluster on one Linux machine: one rank per network namespace, over shaped links.

    sudo python -m calibrate.testbed --nodes 4 --bandwidth 1Gbit/s --delay 100us -- \\
        calibrate.collectives --out runs/testbed -e 1M

builds ``--nodes`` namespaces joined through a bridge by veth links of the given rate and one-way
delay (see :mod:`calibrate.testbed.net`), then runs the job once per namespace with the variables
torchrun would set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``,
``MASTER_ADDR`` = node 0's address, ``MASTER_PORT``) and ``GLOO_SOCKET_IFNAME=eth0``, so each rank
is a node of its own and every collective crosses the emulated fabric. Rank 0 prints to this
terminal; the other ranks' output is shown if the job fails. The namespaces are always removed
afterwards: on success, on failure, on timeout, on Ctrl-C and on SIGTERM/SIGHUP.
``--cleanup`` removes namespaces left by a testbed that was killed with SIGKILL.

Needs root and iproute2. Only private addresses (10.213.0.x) are used, and only inside the
namespaces the testbed creates.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from calibrate.testbed.net import LinkShape, Testbed, TestbedError, can_create_namespaces, stale_namespaces
from simcore.errors import cli_entry
from simcore.units import parse_bandwidth, parse_time

__all__ = ["main", "rank_environment", "run_job", "signals_unwind"]

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
                processes.append(subprocess.Popen(
                    command, env=rank_environment(testbed, rank, port, threads), start_new_session=True,
                    stdout=None if rank == 0 else log, stderr=log,
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m calibrate.testbed", description=__doc__.split("\n")[0],
                                usage="%(prog)s --nodes N --bandwidth RATE [--delay TIME] -- JOB_MODULE [JOB ARGS...]")  # fmt: skip
    p.add_argument("--nodes", type=int, default=2, help="namespaces, one rank each (default 2)")
    p.add_argument(
        "--bandwidth", default="1Gbit/s", help="rate of each node's link, each direction (default 1Gbit/s)"
    )
    p.add_argument(
        "--delay", default="0", help="one-way delay of each link, e.g. 100us (needs netem; default 0)"
    )
    p.add_argument("--port", type=int, default=29500, help="rendezvous port on node 0 (default 29500)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="stop the job after this many seconds")
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


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    reason = can_create_namespaces()
    if reason is not None:
        raise TestbedError(reason)
    if args.cleanup:
        stale = stale_namespaces()
        for name in stale:
            subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)
        print(f"removed {len(stale)} stale namespace(s)")
        return 0
    testbed = Testbed(args.nodes, LinkShape(parse_bandwidth(args.bandwidth), parse_time(args.delay)))
    print(f"testbed: {args.nodes} nodes, {args.bandwidth} links, delay {args.delay}, namespaces {testbed.tag}-*",
          flush=True)  # fmt: skip
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
