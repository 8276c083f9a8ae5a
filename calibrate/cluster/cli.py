"""A real Slurm cluster on this machine for as long as a command runs, then nothing left of it.

    sudo python -m calibrate.cluster --nodes 2                        # a shell on the login node
    sudo python -m calibrate.cluster --nodes 2 -- sbatch --wait --nodes=2 --gpus-per-node=0 \\
        --ntasks-per-node=1 --cpus-per-task=1 calibrate/slurm/srun_per_gpu.sbatch

starts munged, slurmctld and one slurmd per node, each node a network namespace with a shaped
link (see :mod:`calibrate.cluster.emulated`), waits until ``sinfo`` shows every node idle, then
runs the command (default: your shell) on the login node with ``SLURM_CONF`` pointing at the
cluster, in the current directory. When the command exits, or on Ctrl-C (the shell itself
ignores it), SIGTERM or SIGHUP, every daemon, job, namespace and file of the cluster is removed;
the exit status is the command's. ``--cleanup`` removes what a cluster killed with SIGKILL left behind.

Needs root, iproute2, and Debian's ``slurm-wlm`` and ``munge`` packages (installs nothing).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from calibrate.cluster.daemons import ClusterError, die_with_parent, stop_namespaces
from calibrate.cluster.emulated import NETNS_ETC, SlurmCluster, cluster_unavailable, slurm_cluster
from calibrate.testbed.cli import signals_unwind
from calibrate.testbed.net import LinkShape, can_create_namespaces, stale_namespaces
from simcore.cliargs import Parser, int_range, real_range
from simcore.errors import cli_entry
from simcore.units import parse_bandwidth

__all__ = ["cleanup", "main"]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m calibrate.cluster", description=__doc__.split("\n")[0],
                                usage="%(prog)s [--nodes N] [--cpus N] [--bandwidth RATE] [-- COMMAND...]")  # fmt: skip
    p.add_argument("--nodes", type=int_range(1, 64), default=2, help="emulated nodes, one slurmd each")
    p.add_argument("--cpus", type=int_range(1, 1024), default=2, help="CPUs= of every node in slurm.conf")
    p.add_argument("--bandwidth", default="1Gbit/s", help="rate of each node's link, each direction")
    p.add_argument(
        "--timeout",
        type=real_range(0.0, 86_400.0, unit="s"),  # 0: give up at once (shows the daemons' logs)
        default=60.0,
        help="seconds to wait for the nodes to be idle",
    )
    p.add_argument("--cleanup", action="store_true", help="only remove what killed clusters left, then exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run on the login node")
    args = p.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return args


def cleanup() -> list[str]:
    """Remove the namespaces, hosts files and state directories of clusters whose process is gone."""
    stale = [name for name in stale_namespaces() if "-slurm" in name]
    stop_namespaces(stale)  # job steps of a killed cluster
    for name in stale:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)
    leftovers = [*NETNS_ETC.glob("trainsim-*-slurm*"), *Path(tempfile.gettempdir()).glob("trainsim-*-slurm*")]
    for path in leftovers:
        if stale_namespaces([path.name]):  # named after a process that is gone
            shutil.rmtree(path, ignore_errors=True)
    return stale


def _run(cluster: SlurmCluster, command: list[str], interactive: bool) -> int:
    """Run ``command`` on the login node and return its exit status.

    Ctrl-C interrupts a given command and tears the cluster down; an interactive shell gets
    Ctrl-C from the terminal itself (and ignores it), so the cluster stays up until it exits.
    """
    proc = subprocess.Popen(cluster.client_command(command), env=cluster.env(),
                            preexec_fn=functools.partial(die_with_parent, signal.SIGHUP))  # fmt: skip
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if interactive else None
    try:
        status = proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if proc.poll() is None:  # interrupted; what it started is stopped with the cluster
            proc.send_signal(signal.SIGHUP)  # as a closed terminal: a shell ignores SIGTERM, not this
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return status if status >= 0 else 128 - status


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.cleanup:
        reason = can_create_namespaces()
        if reason is not None:
            raise ClusterError(reason)
        print(f"removed {len(cleanup())} stale namespace(s)")
        return 0
    if not 0 <= args.timeout < math.inf:
        raise ClusterError(f"--timeout must be a finite number of seconds, at least 0; got {args.timeout:g}")
    reason = cluster_unavailable()
    if reason is not None:
        raise ClusterError(reason)
    interactive = not args.command
    command = args.command or [os.environ.get("SHELL", "/bin/bash")]
    shape = LinkShape(parse_bandwidth(args.bandwidth))
    with signals_unwind(), slurm_cluster(args.nodes, cpus_per_node=args.cpus, shape=shape,
                                         start_timeout_s=args.timeout) as cluster:  # fmt: skip
        names = ", ".join(f"{name} {cluster.testbed.address(i)}" for i, name in enumerate(cluster.node_names))
        print(f"slurm cluster up: {names}, {args.bandwidth} links; SLURM_CONF={cluster.conf_path}; "
              f"running {' '.join(command)} on the login node", file=sys.stderr, flush=True)  # fmt: skip
        return _run(cluster, command, interactive)


if __name__ == "__main__":
    raise SystemExit(main())
