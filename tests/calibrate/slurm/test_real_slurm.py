"""Both sbatch templates under a real Slurm (Debian's slurm-wlm) across emulated nodes, faults included.

The cluster is the ``slurm`` fixture (conftest.py): 4 nodes, each a network namespace with its own
slurmd, hostname and 1 Gbit/s link. The time-limit test comes last: its job has been running since
the cluster came up.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from calibrate.cluster.daemons import namespace_pids
from calibrate.common.records import read_records
from calibrate.fit import cli as fit
from experiments.what_if import cli as what_if
from simcore.calibration.profile_json import load_profile
from tests.calibrate.slurm.conftest import (
    FAST_LINK,
    TIME_LIMITED_ARGS,
    TIME_LIMITED_NODES,
    RealSlurm,
    needs_slurm,
)
from tests.paths import REPO

pytestmark = [needs_slurm, pytest.mark.root, pytest.mark.integration, pytest.mark.slow]

# Up to 256 KiB: the fit needs sizes where the bandwidth term shows above the latency's jitter (a
# sweep that stopped at 4 KiB once fitted 2.6e18 B/s, and the fit was rightly dropped).
TINY_SWEEP = "--ops all_reduce,send_recv -b 8 -e 256K -f 8 -n 3 -w 1 --repeats 2"
TINY_COMPUTE = ("--matmul-sizes 16,32,64 --mem-bytes 256K -n 2 -w 1 --repeats 1 --layers linear,conv2d "
                "--slowdown-bytes 64K --dtypes fp32 --op-chains 4,16")  # fmt: skip
TINY_TRAIN = (
    "--model cnn --width 4 --depth 1 --image-size 8 --batch 8 --strategy ddp --steps 4 --eval-every 0"
)
CPU_TWO_HOSTS = REPO / "topologies" / "examples" / "cpu-two-hosts.yaml"
SMALL_MODEL = REPO / "simcore" / "workload" / "models" / "examples" / "cifar-cnn.yaml"


def _collectives(path: Path) -> list[dict[str, Any]]:
    return [r for r in read_records(path) if r["kind"] == "collective"]


def _keys(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["op"], r["size_bytes"], r["group"], r["repeat"]) for r in rows]


def test_every_slurmd_runs_in_its_node_namespace_and_jobs_see_node_names(slurm: RealSlurm) -> None:
    cluster = slurm.cluster
    assert set(cluster.node_states()) == {"node0", "node1", "node2", "node3"}
    for node, name in enumerate(cluster.node_names):
        daemon = next(d for d in cluster.daemons if d.name == f"slurmd-{name}")
        assert daemon.process.pid in namespace_pids(cluster.namespace(node))
        shown = cluster.run(["scontrol", "show", "node", name]).stdout
        assert f"NodeAddr={cluster.testbed.address(node)} " in shown
    step = cluster.run(["srun", "--nodelist=node[0-1]", "--nodes=2", "sh", "-c",
                        "echo $(hostname) $(getent hosts node1 | cut -d' ' -f1)"])  # fmt: skip
    assert sorted(step.stdout.split("\n")[:2]) == ["node0 10.213.0.2", "node1 10.213.0.2"]


def test_torchrun_template_meets_at_a_c10d_rendezvous_across_two_nodes(slurm: RealSlurm) -> None:
    out = slurm.work / "torchrun"
    env = slurm.job_env(out, "calibrate.collectives", TINY_SWEEP, GPUS_PER_NODE="2")
    info, text = slurm.run("torchrun_per_node.sbatch", env)
    assert info["JobState"] == "COMPLETED", text[-3000:]
    assert "rendezvous node0:29500" in text
    records = read_records(out / "collectives.jsonl")
    assert records[0]["hostnames"] == ["node0", "node0", "node1", "node1"]
    groups = {(r["group"], r["ranks"], r["nodes"]) for r in records if r["kind"] == "collective"}
    assert groups == {("world", 4, 2), ("intra", 2, 1), ("inter", 2, 2)}


@pytest.fixture(scope="module")
def measured(slurm: RealSlurm) -> Path:
    """Collectives and compute, one srun task per rank on each of two nodes, as calibrate.fit wants them."""
    runs = slurm.work / "srun-runs"
    for job, args in (("calibrate.collectives", TINY_SWEEP), ("calibrate.compute", TINY_COMPUTE)):
        info, text = slurm.run("srun_per_gpu.sbatch", slurm.job_env(runs, job, args))
        assert info["JobState"] == "COMPLETED", text[-3000:]
    return runs


def test_srun_template_runs_one_task_per_rank(slurm: RealSlurm, measured: Path) -> None:
    rows = _collectives(measured / "collectives.jsonl")
    assert {(r["op"], r["ranks"], r["nodes"], r["scope"]) for r in rows} == {
        ("all_reduce", 2, 2, "inter_node"), ("send_recv", 2, 2, "inter_node")}  # fmt: skip
    assert len(rows) == 2 * 6 * 2  # ops x sizes (8 B..256 KiB) x repeats
    assert Counter(_keys(rows)).most_common(1)[0][1] == 1
    compute = read_records(measured / "compute.jsonl")
    assert (compute[0]["hostname"], compute[0]["env"]["SLURM_NNODES"]) == ("node0", "2")
    assert {"matmul", "memory", "layer", "op_overhead", "slowdown"} <= {r["kind"] for r in compute}


def test_short_training_run_under_srun(slurm: RealSlurm) -> None:
    out = slurm.work / "train" / "train.jsonl"
    info, text = slurm.run("srun_per_gpu.sbatch", slurm.job_env(out, "calibrate.train", TINY_TRAIN))
    assert info["JobState"] == "COMPLETED", text[-3000:]
    records = read_records(out)
    steps = [r for r in records if r["kind"] == "step"]
    assert sorted((r["rank"], r["step"]) for r in steps) == [(rank, s) for rank in (0, 1) for s in range(4)]
    assert all(r["step_time_s"] > 0 for r in steps)


def test_fit_then_what_if_on_the_matching_cpu_cluster(
    slurm: RealSlurm, measured: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile_path = slurm.work / "profile.json"
    assert fit.main([str(measured), "-o", str(profile_path), "--topology", str(CPU_TWO_HOSTS)]) == 0
    profile = load_profile(profile_path)
    assert (profile.cluster.backend, profile.cluster.world_size, profile.cluster.nodes) == ("gloo", 2, 2)
    assert profile.collective_alpha_beta("all_reduce", 2, "inter_node") is not None
    argv = ["--cluster", str(CPU_TWO_HOSTS), "--gpus", "2", "--model", str(SMALL_MODEL), "--strategies", "ddp",
            "--format", "json"]  # fmt: skip
    capsys.readouterr()
    steps = []
    for extra in ([], ["--calibration", str(profile_path)]):
        assert what_if.main([*argv, *extra]) == 0
        steps.append(json.loads(capsys.readouterr().out)["records"][0]["step_time_s"])
    assert steps[1] > 0 and steps[1] != steps[0]  # the measured cluster, not the placeholder figures


def test_scancel_mid_job_leaves_no_process_behind(slurm: RealSlurm) -> None:
    cluster, out = slurm.cluster, slurm.work / "cancelled"
    endless = "--ops all_reduce -b 1M -e 1M -n 20 -w 1 --repeats 100000"
    env = slurm.job_env(out, "calibrate.collectives", endless, GPUS_PER_NODE="1")
    job = slurm.submit("torchrun_per_node.sbatch", env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _collectives(out / "collectives.jsonl"):
        time.sleep(0.5)
    assert _collectives(out / "collectives.jsonl"), cluster.job(job)
    assert cluster.job_processes(0) and cluster.job_processes(1)  # torchrun, its ranks, slurmstepd
    cluster.run(["scancel", job])
    assert cluster.wait(job, timeout_s=60)["JobState"] == "CANCELLED"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (cluster.job_processes(0) or cluster.job_processes(1)):
        time.sleep(0.2)
    assert cluster.job_processes(0) == [] and cluster.job_processes(1) == []
    assert set(cluster.node_states().values()) <= {"idle", "alloc"}  # nodes 2-3 may still be busy


@pytest.mark.parametrize("template", ["torchrun_per_node.sbatch", "srun_per_gpu.sbatch"])
@pytest.mark.parametrize(
    ("job", "job_args", "error"),
    [
        ("calibrate.colectives", TINY_SWEEP, "error: JOB='calibrate.colectives' is not a calibration job"),
        ("calibrate.collectives", "-b 8 -e 4", "error: sizes: need 1 <= -b (8) <= -e (4)"),
    ],
)
def test_bad_job_or_arguments_fail_with_the_jobs_own_error_line(
    slurm: RealSlurm, template: str, job: str, job_args: str, error: str
) -> None:
    out = slurm.work / f"bad-{template}-{job}"
    info, text = slurm.run(template, slurm.job_env(out, job, job_args, GPUS_PER_NODE="1"), nodes="node0")
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0")
    errors = [line for line in text.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(error), text[-3000:]
    assert "Traceback" not in text and "ChildFailedError" not in text
    assert not out.exists()  # no rank started, nothing written


def test_time_limit_keeps_what_was_measured_and_resume_completes_it(slurm: RealSlurm) -> None:
    cluster, out = slurm.cluster, slurm.work / "time-limited"
    info = cluster.wait(slurm.time_limited_job, timeout_s=180)
    text = Path(info["StdOut"]).read_text(errors="replace")
    assert info["JobState"] == "TIMEOUT" and "DUE TO TIME LIMIT" in text, text[-2000:]
    first = _collectives(out / "collectives.jsonl")
    repeats = int(TIME_LIMITED_ARGS.split("--repeats ")[1])
    assert 0 < len(first) < repeats  # it measured, and was stopped before the end
    for node in (2, 3):  # the rest at full speed: the point is what --resume does, not the link
        cluster.shape(node, FAST_LINK)
    env = slurm.job_env(out, "calibrate.collectives", TIME_LIMITED_ARGS + " --resume")
    info, text = slurm.run("srun_per_gpu.sbatch", env, nodes=TIME_LIMITED_NODES)
    assert info["JobState"] == "COMPLETED", text[-3000:]
    rows = _collectives(out / "collectives.jsonl")
    assert rows[: len(first)] == first  # nothing measured before the limit was lost or rewritten
    assert sorted(_keys(rows)) == [("all_reduce", 262144, "world", r) for r in range(repeats)]  # none twice
