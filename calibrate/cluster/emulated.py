"""A real Slurm cluster on one Linux machine: munged, slurmctld, and one slurmd per emulated node.

    with slurm_cluster(nodes=2) as cluster:
        job = cluster.submit(["--nodes=2", "calibrate/slurm/srun_per_gpu.sbatch"])
        print(cluster.wait(job)["JobState"])

Each node is a network namespace of :class:`calibrate.testbed.net.Testbed` (its own address, its
link to the switch shaped with tc) with its own hostname (the node name) and hosts file, so jobs
reach their peers by Slurm node name as on a real cluster; ``NodeAddr`` is the namespace's
address. One more namespace on the same switch is the login node: slurmctld runs there, and so do
clients (``sbatch``, ``squeue``, ``scancel``...) through :meth:`SlurmCluster.run`.

Nothing is installed: :func:`cluster_unavailable` says why a cluster cannot start here (not root,
no namespaces, Slurm or munge missing). Munge gets its own key and socket in the state directory,
so a system munged, if any, is neither used nor disturbed. :meth:`SlurmCluster.stop` (run by
:func:`slurm_cluster` on success, failure and Ctrl-C; SIGTERM too under
:func:`calibrate.testbed.cli.signals_unwind`) stops the daemons by PID, then every process left
in the namespaces (job steps, ranks), deletes the namespaces and their hosts files, and removes
the state directory.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from calibrate.cluster.config import ClusterLayout, hosts_file, slurm_conf
from calibrate.cluster.daemons import (
    ClusterError,
    Daemon,
    log_tail,
    missing_binaries,
    namespace_pids,
    search_path,
    stop_namespaces,
)
from calibrate.testbed.net import LinkShape, Testbed, can_create_namespaces, shaping_commands

__all__ = ["FINISHED_STATES", "NETNS_ETC", "SlurmCluster", "cluster_unavailable", "slurm_cluster"]

FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE"})  # fmt: skip
NETNS_ETC = Path("/etc/netns")  # ip netns' per-namespace /etc (we keep each node's hosts file there)
NETNS_RUN = Path("/run/netns")  # where ip netns keeps its namespaces
DEFAULT_SHAPE = LinkShape(1.25e8)  # 1 Gbit/s, the ethernet of topologies/examples/cpu-two-hosts.yaml
# Variables a launcher or an outer Slurm job would have set: jobs of this cluster must not inherit them.
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_CLIENT_TIMEOUT_S = 30
_serial = itertools.count()


def cluster_unavailable() -> str | None:
    """None when an emulated cluster can start here, else why not (for skips and error lines)."""
    return missing_binaries() or can_create_namespaces()


class SlurmCluster:
    """``nodes`` slurmd daemons in namespaces of their own, a controller, and munge; see the module doc."""

    def __init__(self, nodes: int = 2, *, cpus_per_node: int = 2, shape: LinkShape = DEFAULT_SHAPE,
                 start_timeout_s: float = 60.0) -> None:  # fmt: skip
        if not 1 <= nodes <= 64:
            raise ClusterError(f"--nodes must be between 1 and 64, got {nodes}")
        if cpus_per_node < 1:
            raise ClusterError(f"--cpus must be at least 1, got {cpus_per_node}")
        tag = f"trainsim-{os.getpid()}-slurm{next(_serial)}"  # what --cleanup looks for once we are gone
        self.testbed = Testbed(nodes + 1, shape, tag=tag)
        self.nodes, self.cpus_per_node, self.start_timeout_s = nodes, cpus_per_node, start_timeout_s
        self.node_names = tuple(f"node{i}" for i in range(nodes))
        self.controller_namespace = self.testbed.namespace(nodes)
        self.layout: ClusterLayout | None = None
        self.daemons: list[Daemon] = []
        self._last_states: dict[str, str] = {}

    def namespace(self, node: int) -> str:
        """Network namespace of node ``node`` (``nodes`` is the login node's)."""
        return self.testbed.namespace(node)

    @property
    def conf_path(self) -> Path:
        if self.layout is None:
            raise ClusterError("the cluster is not running; call start() first")
        return self.layout.conf_path

    # -- start -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Build namespaces, files and daemons, and wait for every node to be idle.

        On failure what exists is left for :meth:`stop`, which the caller must always run.
        """
        reason = cluster_unavailable()
        if reason is not None:
            raise ClusterError(reason)
        state = Path(tempfile.mkdtemp(prefix=f"{self.testbed.tag}-"))
        state.chmod(0o755)  # munged wants every directory above its socket searchable by all
        self.layout = ClusterLayout(
            name="trainsim", state_dir=state, controller_host=socket.gethostname().split(".")[0],
            controller_addr=self.testbed.address(self.nodes), cpus_per_node=self.cpus_per_node,
            nodes=tuple((name, self.testbed.address(i)) for i, name in enumerate(self.node_names)),
        )  # fmt: skip
        self.testbed.create()
        self._write_files(self.layout)
        self._start_daemons(self.layout)
        self.wait_idle(self.start_timeout_s)

    def _write_files(self, layout: ClusterLayout) -> None:
        (layout.state_dir / "ctld").mkdir()
        for name in layout.node_names:
            (layout.state_dir / f"spool-{name}").mkdir()
        layout.conf_path.write_text(slurm_conf(layout))
        key = layout.state_dir / "munge.key"
        key.touch(mode=0o400)
        key.write_bytes(os.urandom(128))  # a munge key is random bytes; mungekey writes 1024 bits
        hosts = hosts_file(Path("/etc/hosts").read_text(errors="replace"), layout)
        for node in range(self.nodes + 1):
            etc = NETNS_ETC / self.namespace(node)
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)

    def _start_daemons(self, layout: ClusterLayout) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(SLURM_CONF=str(layout.conf_path), PATH=search_path())
        s, conf = layout.state_dir, str(layout.conf_path)
        self.daemons.append(Daemon.start("munged", [
            "munged", "-F", f"--socket={layout.munge_socket}", f"--key-file={s / 'munge.key'}",
            f"--log-file={layout.log('munged')}", f"--pid-file={s / 'munged.pid'}", f"--seed-file={s / 'munged.seed'}",
        ], s / "munged.out", env))  # fmt: skip
        self._wait_for(layout.munge_socket.exists, 10.0, "munged did not create its socket")
        login = ["ip", "netns", "exec", self.controller_namespace]
        self.daemons.append(
            Daemon.start("slurmctld", [*login, "slurmctld", "-D", "-f", conf], s / "slurmctld.out", env)
        )
        for node, name in enumerate(self.node_names):
            command = [*self.node_command(node), "slurmd", "-D", "-N", name, "-f", conf]
            self.daemons.append(Daemon.start(f"slurmd-{name}", command, s / f"slurmd-{name}.out", env))

    def node_command(self, node: int) -> list[str]:
        """A command prefix that runs on node ``node``: its network namespace, hosts file and hostname.

        Not ``ip netns exec``: that also remounts ``/sys``, which hides the cgroup hierarchies that
        slurmd's cgroup plugin must find even when no cgroup is used. The hostname matters:
        torchrun's c10d rendezvous hosts its store on the node whose hostname is the endpoint's.
        """
        hosts = NETNS_ETC / self.namespace(node) / "hosts"
        return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"', str(hosts),
                self.node_names[node], "nsenter", f"--net={NETNS_RUN / self.namespace(node)}", "--"]  # fmt: skip

    def _wait_for(self, ready: Callable[[], bool], timeout_s: float, what: str,
                  detail: Callable[[], str] = str) -> None:  # fmt: skip
        """Poll ``ready`` until ``timeout_s``; a daemon that exits or the timeout fail with the logs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [d for d in self.daemons if not d.alive()]
            if dead:
                raise ClusterError(
                    f"{dead[0].name} exited with status {dead[0].process.returncode}\n{self.logs()}"
                )
            time.sleep(0.2)
        raise ClusterError(f"{what} within {timeout_s:g} s{detail()}\n{self.logs()}")

    def wait_idle(self, timeout_s: float) -> None:
        """Wait until ``sinfo`` shows every node idle, or fail with the daemons' logs."""
        idle = dict.fromkeys(self.node_names, "idle")
        self._wait_for(lambda: self.node_states() == idle, timeout_s, "the nodes did not all become idle",
                       lambda: f" (sinfo: {self._last_states or 'no answer'})")  # fmt: skip

    def node_states(self) -> dict[str, str]:
        """``{node name: state}`` as ``sinfo`` reports it (``idle``, ``alloc``, ``down*``...)."""
        result = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], check=False)
        self._last_states = dict(
            line.split() for line in result.stdout.splitlines() if len(line.split()) == 2
        )
        return self._last_states

    def logs(self) -> str:
        """The last lines of every daemon's log, and of the output of those that exited, for errors."""
        if self.layout is None:
            return ""
        files = [self.layout.log(d.name) for d in self.daemons]
        files += [d.log for d in self.daemons if not d.alive() or not self.layout.log(d.name).exists()]
        return "\n".join(tail for tail in map(log_tail, files) if tail)

    # -- use ---------------------------------------------------------------------------------------

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """The environment for clients and, as sbatch exports it, for jobs.

        This cluster's ``SLURM_CONF``, gloo and NCCL on each node's link (``eth0``, as the testbed
        gives its ranks), this Python first on ``PATH``; nothing of an outer launcher or Slurm job.
        """
        source = os.environ if base is None else base
        env = {k: v for k, v in source.items() if not k.startswith("SLURM_") and k not in _LAUNCHER_VARS}
        env.update(SLURM_CONF=str(self.conf_path), GLOO_SOCKET_IFNAME="eth0", NCCL_SOCKET_IFNAME="eth0",
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)]))  # fmt: skip
        env.update(extra)
        return env

    def client_command(self, command: Sequence[str]) -> list[str]:
        """``command`` run on the login node (the controller's namespace)."""
        return ["ip", "netns", "exec", self.controller_namespace, *command]

    def run(self, command: Sequence[str], *, env: Mapping[str, str] | None = None, check: bool = True,
            cwd: str | os.PathLike[str] | None = None,
            timeout_s: float = _CLIENT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run a client command on the login node; with ``check``, a failure is a ClusterError."""
        result = subprocess.run(self.client_command(command), capture_output=True, text=True, cwd=cwd,
                                env=dict(self.env() if env is None else env), timeout=timeout_s)  # fmt: skip
        if check and result.returncode != 0:
            raise ClusterError(f"'{' '.join(command)}' failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def submit(self, args: Sequence[str], *, env: Mapping[str, str] | None = None,
               cwd: str | os.PathLike[str] | None = None) -> str:  # fmt: skip
        """``sbatch --parsable ARGS`` on the login node; returns the job id."""
        return self.run(["sbatch", "--parsable", *args], env=env, cwd=cwd).stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (``JobState``, ``ExitCode``, ``StdOut``, ``NodeList``...)."""
        text = self.run(["scontrol", "--oneliner", "show", "job", job_id]).stdout
        return dict(word.split("=", 1) for word in text.split() if "=" in word)

    def wait(self, job_id: str, timeout_s: float = 300.0) -> dict[str, str]:
        """Wait until the job has finished and released its nodes; its final ``scontrol`` record."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in FINISHED_STATES and not self._completing(job_id):
                return info
            time.sleep(0.5)
        raise ClusterError(f"job {job_id} did not finish within {timeout_s:g} s: {self.job(job_id)}")

    def _completing(self, job_id: str) -> bool:
        return "CG" in self.run(["squeue", "--noheader", "--jobs", job_id, "--format=%t"], check=False).stdout

    def job_processes(self, node: int) -> list[int]:
        """PIDs on node ``node`` other than its slurmd: job steps and whatever they started."""
        daemons = {d.process.pid for d in self.daemons}
        return [pid for pid in namespace_pids(self.namespace(node)) if pid not in daemons]

    def shape(self, node: int, shape: LinkShape) -> None:
        """Reshape node ``node``'s link (both directions) while the cluster runs."""
        for namespace, device in ((self.namespace(node), "eth0"), (self.testbed.switch, f"p{node}")):
            for command in shaping_commands(namespace, device, shape):
                replace = ["replace" if word == "add" else word for word in command]
                result = subprocess.run(replace, capture_output=True, text=True, timeout=_CLIENT_TIMEOUT_S)
                if result.returncode != 0:
                    raise ClusterError(f"'{' '.join(replace)}' failed: {result.stderr.strip()}")

    # -- stop --------------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Stop everything this cluster started and remove its namespaces and files; returns what failed."""
        problems: list[str] = []
        slurmds = [d for d in self.daemons if d.name.startswith("slurmd")]
        others = [d for d in self.daemons if not d.name.startswith("slurmd")]
        for daemon in [*slurmds, *reversed(others)]:  # no new job steps first; munged last
            daemon.stop()
        # slurmstepd outlives slurmd, and ranks may outlive both: stop all that is left on the nodes
        left = stop_namespaces([self.namespace(node) for node in range(self.nodes + 1)])
        if left:
            problems.append(f"processes {left} survived SIGKILL in the cluster's namespaces")
        problems += [f"namespace {name} could not be deleted" for name in self.testbed.destroy()]
        for node in range(self.nodes + 1):
            shutil.rmtree(NETNS_ETC / self.namespace(node), ignore_errors=True)
        if self.layout is not None:
            shutil.rmtree(self.layout.state_dir, ignore_errors=True)
        self.daemons = []
        return problems


@contextlib.contextmanager
def slurm_cluster(nodes: int = 2, *, cpus_per_node: int = 2, shape: LinkShape = DEFAULT_SHAPE,
                  start_timeout_s: float = 60.0) -> Iterator[SlurmCluster]:  # fmt: skip
    """A started :class:`SlurmCluster`, always torn down on the way out (errors and Ctrl-C included)."""
    cluster = SlurmCluster(nodes, cpus_per_node=cpus_per_node, shape=shape, start_timeout_s=start_timeout_s)
    failed = True
    try:
        cluster.start()
        yield cluster
        failed = False
    finally:
        problems = cluster.stop()
        if problems and not failed:  # never hide the error that brought us here
            raise ClusterError("teardown left things behind: " + "; ".join(problems))
        if problems:
            print("warning: teardown left things behind: " + "; ".join(problems), file=sys.stderr)
