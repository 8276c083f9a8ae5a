"""The calibration jobs run for real (gloo on CPU, 2 processes, tiny sizes) and fit into a profile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import pytest

from calibrate.common.records import read_records
from calibrate.fit import cli as fit
from calibrate.nccl_tests.parser import parse_text
from simcore.calibration.profile_json import load_profile
from simcore.topology import Topology

pytest.importorskip("torch", reason="these tests run the torch calibration jobs")

pytestmark = pytest.mark.integration

TINY_COLLECTIVES = [
    "-b",
    "8",
    "-e",
    "4K",
    "-f",
    "8",
    "-n",
    "2",
    "-w",
    "1",
    "--repeats",
    "2",
    "--threads",
    "1",
]
TINY_COMPUTE = ["--threads", "1", "--matmul-sizes", "16,32,64", "--mem-bytes", "256K", "-n", "2", "-w", "1",
                "--repeats", "1", "--layers", "linear,conv2d", "--slowdown-bytes", "64K", "--dtypes", "fp32",
                "--op-chains", "4,16"]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RANK", None)
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    return env


def _torchrun(module: str, args: list[str], timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", module, *args]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _one_host_two_cpus() -> Topology:
    graph = nx.DiGraph()
    for r in range(2):
        graph.add_node(f"h0/cpu{r}", kind="cpu", host=0)
    graph.add_edge("h0/cpu0", "h0/cpu1", bandwidth_Bps=1e10, latency_s=1e-6, kind="memory")
    graph.add_edge("h0/cpu1", "h0/cpu0", bandwidth_Bps=1e10, latency_s=1e-6, kind="memory")
    return Topology("one-host", graph, ["h0/cpu0", "h0/cpu1"])


@pytest.mark.slow
def test_two_rank_jobs_fit_into_a_profile_the_simulator_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    collectives = _torchrun("calibrate.collectives", ["--out", str(runs), "--csv", *TINY_COLLECTIVES])
    _torchrun("calibrate.compute", ["--out", str(runs), *TINY_COMPUTE])

    rows = [r for r in read_records(runs / "collectives.jsonl") if r["kind"] == "collective"]
    ops = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
    assert sorted({r["op"] for r in rows}) == sorted(ops)
    assert {(r["ranks"], r["scope"], r["backend"]) for r in rows} == {(2, "intra_node", "gloo")}
    assert len(read_records(runs / "collectives.csv")) == len(rows)
    printed = parse_text(collectives.stdout, source="stdout")  # the printed table is nccl-tests' own
    assert len(printed) == len(rows)

    compute = read_records(runs / "compute.jsonl")
    assert {r["kind"] for r in compute} == {
        "provenance",
        "matmul",
        "memory",
        "layer",
        "op_overhead",
        "slowdown",
    }
    assert all(r["threads"] == 1 for r in compute if r["kind"] != "provenance")

    profile_path = tmp_path / "profile.json"
    capsys.readouterr()
    assert fit.main([str(runs), "-o", str(profile_path)]) == 0
    profile = load_profile(profile_path)  # every number in its physical range
    # Messages of 8 B .. 4 KiB over loopback are latency-bound: a fit whose bandwidth they cannot
    # determine is left out, with a warning naming it; every op is either fitted or named.
    left_out = [line for line in capsys.readouterr().err.splitlines() if "left out of the profile" in line]
    fitted = [op for op in ops if profile.collective_alpha_beta(op, 2, "intra_node") is not None]
    assert sorted(
        fitted + [op for op in ops if any(line.startswith(f"warning: {op}/2/") for line in left_out)]
    ) == sorted(ops)
    assert len(left_out) == len(ops) - len(fitted)
    assert profile.compute_rate(1e6, "fp32") is not None
    assert profile.memory_bandwidth_Bps and profile.memory_bandwidth_Bps > 0
    assert profile.comm_compute_slowdown and profile.comm_compute_slowdown >= 1
    assert set(profile.op_overhead_s) == {"fwd", "bwd"} and min(profile.op_overhead_s.values()) > 0
    assert (profile.cluster.backend, profile.cluster.world_size, profile.cluster.nodes) == ("gloo", 2, 1)
    profile.check_against(_one_host_two_cpus())


def _keys(path: Path) -> list[tuple[object, ...]]:
    return [
        (r["op"], r["size_bytes"], r["group"], r["repeat"])
        for r in read_records(path)
        if r["kind"] == "collective"
    ]


def test_single_process_run_and_torn_file_resume(tmp_path: Path) -> None:
    """A torn last row (the job died writing it) is skipped on reading and measured again on --resume."""
    args = ["--out", str(tmp_path), "--ops", "all_reduce,broadcast", "-b", "8", "-e", "1K", "-f", "4",
            "-n", "2", "-w", "0", "--repeats", "2", "--threads", "1"]  # fmt: skip
    command = [sys.executable, "-m", "calibrate.collectives", *args]
    subprocess.run(command, check=True, capture_output=True, timeout=120, env=_env())
    path = tmp_path / "collectives.jsonl"
    complete = _keys(path)
    assert len(complete) == 2 * 4 * 2  # ops x sizes (8, 32, 128, 512) x repeats
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-4]) + lines[-4][: len(lines[-4]) // 2])  # killed mid-row
    assert _keys(path) == complete[:-4]
    resumed = subprocess.run([*command, "--resume"], check=True, capture_output=True, text=True, timeout=120,
                             env=_env())  # fmt: skip
    torn_line = len(lines) - 3  # the half row is the file's last line
    assert f"warning: {path}:{torn_line}: dropped a torn record" in resumed.stderr
    assert f"already holds {len(complete) - 4} measurement(s)" in resumed.stderr
    assert sorted(_keys(path), key=str) == sorted(complete, key=str)  # every row once, none twice


def _kill_once_rows(job: subprocess.Popen[bytes], path: Path, rows: int, timeout_s: float = 120) -> bool:
    """SIGKILL ``job`` as soon as ``path`` holds ``rows`` rows; whether it was still running then
    (False: it finished or died first, and the kill tested nothing)."""
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and job.poll() is None and len(_keys(path)) < rows:
            time.sleep(0.02)
        running = job.poll() is None
        job.send_signal(signal.SIGKILL)
    finally:
        job.wait(timeout=60)
    return running


@pytest.mark.slow
def test_killed_job_keeps_its_rows_and_resumes(tmp_path: Path) -> None:
    # 14 sizes (8 B .. 64 KiB) x 4 repeats of 1000 iterations: ~30 ms a row, so the job is still
    # measuring well after its third row (about 1.5 s of rows remain when it is killed).
    args = ["--out", str(tmp_path), "--ops", "all_reduce", "-b", "8", "-e", "64K", "-f", "2",
            "-n", "1000", "-w", "1", "--repeats", "4", "--threads", "1", "--groups", "world"]  # fmt: skip
    total = 14 * 4
    command = [sys.executable, "-m", "calibrate.collectives", *args]
    path = tmp_path / "collectives.jsonl"
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    assert _kill_once_rows(job, path, 3), "the job ended before it was killed: make it longer"
    measured = _keys(path)
    assert 3 <= len(measured) < total, "the kill came after the last row: nothing was left to resume"
    resumed = subprocess.run([*command, "--resume"], check=True, capture_output=True, text=True, timeout=240,
                             env=_env())  # fmt: skip
    assert f"already holds {len(measured)} measurement(s) (all_reduce {len(measured)}); skipping them" in (
        resumed.stderr
    )
    final = _keys(path)
    assert final[: len(measured)] == measured  # kept, not measured again
    assert len(final) == len(set(final)) == total  # nothing lost, nothing twice


def test_bad_arguments_are_one_error_line() -> None:
    command = [
        sys.executable,
        "-m",
        "calibrate.collectives",
        "--ops",
        "all_reduce,allgather",
        "--out",
        "unused",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_env())
    assert result.returncode == 2
    assert result.stderr.startswith("error: --ops") and result.stderr.count("\n") == 1


def test_op_chain_runs_one_operator_per_link() -> None:
    """The op-overhead benchmark's premise, checked with torch's dispatch counter: forward runs
    ``ops`` operators and backward ``ops`` plus a constant, so the slope is the cost of one."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from calibrate.compute.layers import op_overhead_benchmarks

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    counts = {}
    for _item, info, call in op_overhead_benchmarks([8, 32], torch.device("cpu")):
        Count.calls = 0
        with Count():
            call()
        counts[(info["phase"], info["ops"])] = Count.calls
    assert counts[("fwd", 8)] == 8 and counts[("fwd", 32)] == 32
    assert counts[("bwd", 32)] - counts[("bwd", 8)] == 24


def test_collectives_after_compute_are_measured_and_fitted_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--after-compute-ms``: two gloo ranks compute 2 ms before each timed collective; its rows say
    so and ``calibrate.fit`` puts their fits in the profile's ``collectives_after_compute``."""
    runs = tmp_path / "runs"
    sweep = ["-b", "64K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1", "--repeats", "1", "--threads", "1",
             "--ops", "all_gather,reduce_scatter", "--groups", "world"]  # fmt: skip
    _torchrun("calibrate.collectives", ["--out", str(runs), "--after-compute-ms", "2", *sweep])
    rows = [r for r in read_records(runs / "collectives.jsonl") if r["kind"] == "collective"]
    assert {r["op"] for r in rows} == {"all_gather", "reduce_scatter"}
    assert len(rows) == 6 and all(r["after_compute_ms"] == 2 for r in rows)
    profile_path = tmp_path / "profile.json"
    capsys.readouterr()
    assert fit.main([str(runs), "-o", str(profile_path)]) == 0
    profile = load_profile(profile_path)
    assert profile.collectives == {}
    left_out = capsys.readouterr().err
    for op in ("all_gather", "reduce_scatter"):  # fitted, or (a noisy sweep) named as left out
        fitted = (op, 2, "intra_node") in profile.after_compute
        assert fitted or f"{op}/2/intra_node after compute" in left_out


def test_the_parser_lists_every_layer_benchmark() -> None:
    """``--layers`` is checked against names that need no torch; they must be the benchmarks' own."""
    from calibrate.compute.layers import LAYERS
    from calibrate.compute.options import LAYER_NAMES

    assert tuple(LAYERS) == LAYER_NAMES


def _processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and (entry / "stat").read_text().split()[2] != "Z":
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_killed_torchrun_launcher(tmp_path: Path) -> None:
    """kill -9 of torchrun must not leave its ranks running and appending (they ask Linux to SIGKILL
    them when the launcher dies), so a later --resume never runs beside a live writer."""
    out = tmp_path / "sweep"
    args = ["--out", str(out), "--ops", "all_reduce", "-b", "8", "-e", "64K", "-f", "2",
            "-n", "2000", "-w", "1", "--repeats", "8", "--threads", "1", "--groups", "world"]  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "calibrate.collectives", *args]  # fmt: skip
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    assert _kill_once_rows(job, out / "collectives.jsonl", 2, timeout_s=180), "the job ended first"
    deadline = time.monotonic() + 30
    while _processes_naming(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _processes_naming(str(out))
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived their launcher"
    rows = len(_keys(out / "collectives.jsonl"))
    time.sleep(1.0)
    assert len(_keys(out / "collectives.jsonl")) == rows  # nobody appends any more
