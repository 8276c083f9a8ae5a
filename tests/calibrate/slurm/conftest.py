"""A real Slurm cluster for the template tests: 4 emulated nodes, each a network namespace of its own.

Nodes 0-1 run the tests' jobs one at a time. Nodes 2-3 run one job from the moment the cluster is
up: a collective sweep over slow links that hits its one-minute ``--time`` limit (Slurm checks
limits every 30 s, so that takes 60-90 s); submitting it first lets that minute pass while the
other tests run, and the time-limit test, last in its module, picks it up.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from calibrate.cluster.emulated import NETNS_ETC, SlurmCluster, cluster_unavailable, slurm_cluster
from calibrate.testbed.cli import signals_unwind
from calibrate.testbed.net import LinkShape
from tests.calibrate.cluster.leftovers import namespace_inodes, processes_in
from tests.paths import REPO

SLURM_REASON = cluster_unavailable()
needs_slurm = pytest.mark.skipif(SLURM_REASON is not None, reason=f"real Slurm: {SLURM_REASON}")

SLURM = REPO / "calibrate" / "slurm"
# The templates ask for GPUs; these nodes have none (the CPU-only shape the README describes).
TEMPLATE_OPTIONS = {
    "torchrun_per_node.sbatch": ("--gpus-per-node=0",),
    "srun_per_gpu.sbatch": ("--gpus-per-node=0", "--ntasks-per-node=1", "--cpus-per-task=1"),
}
# The time-limited sweep: 300 rows of ~0.8 s each over 8 Mbit/s links (4% of a core), far past its minute.
SLOW_LINK = LinkShape(1e6)
FAST_LINK = LinkShape(1.25e9)
TIME_LIMITED_ARGS = "--ops all_reduce -b 256K -e 256K -n 4 -w 1 --repeats 300"
TIME_LIMITED_NODES = "node[2-3]"


@dataclass
class RealSlurm:
    """The running cluster, where its jobs write, and the time-limited job submitted at start."""

    cluster: SlurmCluster
    work: Path
    time_limited_job: str = ""

    def job_env(self, out: Path, job: str, job_args: str, **extra: str) -> dict[str, str]:
        env = self.cluster.env(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                               OUT=str(out), JOB=job, JOB_ARGS=job_args)  # fmt: skip
        env.update(extra)
        return env

    def submit(self, template: str, env: Mapping[str, str], *, nodes: str = "node[0-1]",
               options: Sequence[str] = ()) -> str:  # fmt: skip
        """sbatch ``template`` on ``nodes`` from the checkout, its output in the work directory."""
        count = len(self.cluster.run(["scontrol", "show", "hostnames", nodes]).stdout.split())
        args = [f"--output={self.work}/%x-%j.out", f"--nodes={count}", f"--nodelist={nodes}",
                *TEMPLATE_OPTIONS[template], *options, str(SLURM / template)]  # fmt: skip
        return self.cluster.submit(args, env=env, cwd=REPO)

    def run(
        self, template: str, env: Mapping[str, str], *, nodes: str = "node[0-1]"
    ) -> tuple[dict[str, str], str]:
        """Submit, wait, and return the job's final record and its output file's text."""
        info = self.cluster.wait(self.submit(template, env, nodes=nodes), timeout_s=240)
        return info, Path(info["StdOut"]).read_text(errors="replace")


def our_namespaces(cluster: SlurmCluster) -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(cluster.testbed.tag + "-")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealSlurm]:
    if SLURM_REASON is not None:
        pytest.skip(f"real Slurm: {SLURM_REASON}")
    work = tmp_path_factory.mktemp("slurm")
    with signals_unwind(), slurm_cluster(4) as cluster:  # SIGTERM tears down as Ctrl-C does
        real = RealSlurm(cluster, work)
        for node in (2, 3):
            cluster.shape(node, SLOW_LINK)
        env = real.job_env(work / "time-limited", "calibrate.collectives", TIME_LIMITED_ARGS)
        real.time_limited_job = real.submit("srun_per_gpu.sbatch", env, nodes=TIME_LIMITED_NODES,
                                              options=["--time=1"])  # fmt: skip
        daemons = [d.process for d in cluster.daemons]
        inodes = namespace_inodes(our_namespaces(cluster))
        yield real
    # Teardown left nothing: daemons and job processes gone, namespaces and their files deleted, state removed.
    assert all(proc.poll() is not None for proc in daemons) and processes_in(inodes) == []
    assert our_namespaces(cluster) == []
    assert not list(NETNS_ETC.glob(cluster.testbed.tag + "-*"))
    assert cluster.layout is not None and not cluster.layout.state_dir.exists()
