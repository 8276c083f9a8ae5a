"""Fuzz every calibration command line with random flag values (hypothesis), in process.

Whatever the flags, a command ends with status 0 or 2, prints at most one ``error:`` line (exactly
one when it fails), never a traceback, never a non-finite number on stdout, and finishes within a
time bound per example. Values mix valid ones, boundaries, huge sizes and garbage; the output
(``--out``/``-o``) is drawn from a new place, an existing file, a folder or file holding earlier
records (with and without ``--resume``/``--force``) and an unwritable place, made afresh for each
example.

``calibrate.fit`` and ``calibrate.nccl_tests`` run for real on small inputs. The measuring jobs run
their whole command line with the measuring itself replaced (as ``calibrate.slurm.preflight``
does), and the testbed and cluster without making namespaces or starting daemons: what is fuzzed
is every check before the measuring, which is where bad flags must stop. The jobs that import
torch are skipped without it. The default run tries a few examples per command; ``-m slow`` many more.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import FLAG, check_cli_outcome, flag_argv, inside, run_cli
from tests.fuzzing import flag_choice as _choice
from tests.fuzzing import flag_ints as _ints
from tests.paths import TESTS

FAST_EXAMPLES = 5
SLOW_EXAMPLES = 80
SECONDS_PER_EXAMPLE = 60  # far above any run here (the slowest, a fit, takes well under a second)
NCCL = TESTS / "data" / "nccl"
EARLIER = '{"kind": "provenance", "job": "earlier"}\n'


def _sizes(*valid: str) -> st.SearchStrategy[str]:
    return _choice(*valid, "0", "1P", "2000000G", "1e-300", "8.5", "-8")


COLLECTIVES = {
    "-b": _sizes("8", "1K", "64"),
    "-e": _sizes("8", "1K", "1M", "1G"),
    "-f": _ints(1, 2, 4, 1025),
    "--ops": _choice("all_reduce", "all_reduce,send_recv", "alltoall,reduce", "allgather"),
    "--groups": _choice("world", "intra,inter", "rack"),
    "-n": _ints(1, 20, 10**6),
    "-w": _ints(0, 5),
    "--repeats": _ints(1, 3, 1001),
    "-d": _choice("float32", "bfloat16", "int8"),
    "--threads": _ints(1, 4, 5000),
    "--backend": _choice("gloo", "nccl", "tcp"),
    "--csv": st.just(FLAG),
}
COMPUTE = {
    "--threads": _ints(1, 4),
    "--dtypes": _choice("fp32", "fp32,bf16", "fp16", "fp8"),
    "--matmul-sizes": _choice("64", "16,32,64", "0", "64,x", "100000", "1," * 70),
    "--mem-bytes": _sizes("256K", "64M"),
    "--layers": _choice("none", "linear,conv2d", "lstm"),
    "--layer-scale": _ints(1, 4, 65),
    "--op-chains": _choice("none", "4,16", "0", "16,-1"),
    "--slowdown-bytes": _sizes("64K", "4M"),
    "-n": _ints(1, 10),
    "-w": _ints(0, 2),
    "--repeats": _ints(1, 3),
    "--backend": _choice("gloo", "mpi"),
}
TRAIN = {
    "--model": _choice("cnn", "transformer", "resnet"),
    "--strategy": _choice("ddp", "fsdp", "zero1", "ps-ssp", "ps-async", "zero3"),
    "--steps": _ints(1, 20),
    "--batch": _ints(1, 16),
    "--lr": _choice("0.1", "0", "-1", "1e9"),
    "--momentum": _choice("0.9", "0", "1", "1.5"),
    "--width": _ints(8, 16),
    "--threads": _ints(1, 2),
    "--ps-ranks": _ints(1, 2),
    "--slow-rank": _choice("1:3", "0:1.5", "-1:2", "1:0.5", "fast", "1:nan"),
    "--checkpoint-every": _ints(0, 10),
    "--timeout-s": _choice("900", "0", "-5", "1e308"),
    "--backend": _choice("gloo", "nccl", "tcp"),
}
MEMORY_TRUTH = {
    "--models": _choice("gpt2-tiny", "gpt2-tiny,resnet-tiny", "gpt5", "gpt2-tiny,,"),
    "--strategies": _choice("ddp", "ddp,fsdp", "zero3"),
    "--world-sizes": _choice("1", "1,2,4", "0", "1,5000", "two"),
    "--optimizer": _choice("adamw", "sgd", "sgd-momentum", "lamb"),
    "--quiet": st.just(FLAG),
}
FIT = {
    "--max-mape": _choice("0.25", "0.01", "0", "-1"),
    "--min-r2": _choice("0.9", "0", "-5", "2"),
    "--topology": _choice("dgx-a100", "g5.12xlarge", "no-such-cluster", "nope.yaml"),
    "--quiet": st.just(FLAG),
}
NCCL_TESTS = {"--op": _choice("all_reduce", "sendrecv", "all_gather", "allreduce")}
TESTBED = {
    "--nodes": _ints(2, 4, 1, 251),
    "--bandwidth": _choice("1Gbit/s", "100Mbit/s", "0Gbit/s", "1e400Gbit/s", "fast", "1e-300bit/s"),
    "--delay": _choice("0", "100us", "-5us", "1e9s", "1e400s", "soon"),
    "--port": _ints(29500, 0, 65536),
    "--threads": _ints(1, 2),
    "--timeout": _choice("1800", "1", "0", "-1", "1e400"),
    "--cleanup": st.just(FLAG),
}
CLUSTER = {
    "--nodes": _ints(1, 2, 64, 65),
    "--cpus": _ints(1, 2, 1025),
    "--bandwidth": _choice("1Gbit/s", "0Gbit/s", "1e400Gbit/s", "fast"),
    "--timeout": _choice("60", "0", "-1", "1e400"),
    "--cleanup": st.just(FLAG),
}


# --- where each example writes ---------------------------------------------------------------------
def _folder_outs(folder: Path, records: str) -> dict[str, list[str]]:
    """Outputs for a job writing ``records`` into an ``--out`` folder."""
    (folder / "a-file.txt").write_text("earlier results\n")
    held = folder / "held"
    held.mkdir()
    (held / records).write_text(EARLIER)
    (held / "other.jsonl").write_text(EARLIER)
    return {
        "default": [],
        "new": ["--out", str(folder / "new")],
        "file": ["--out", str(folder / "a-file.txt")],
        "held": ["--out", str(held)],
        "held-resume": ["--out", str(held), "--resume"],
        "held-force": ["--out", str(held), "--force"],
        "unwritable": ["--out", "/proc/no/such/place"],
    }


def _file_outs(folder: Path, flag: str = "--out", suffix: str = ".jsonl") -> dict[str, list[str]]:
    """Outputs for a command writing one file (``flag``)."""
    held = folder / f"held{suffix}"
    held.write_text(EARLIER)
    (folder / "a-folder").mkdir(exist_ok=True)
    return {
        "new": [flag, str(folder / f"new{suffix}")],
        "held": [flag, str(held)],
        "held-resume": [flag, str(held), "--resume"],
        "held-force": [flag, str(held), "--force"],
        "folder": [flag, str(folder / "a-folder")],
        "unwritable": [flag, "/proc/no/such/place" + suffix],
    }


def _fit_inputs(folder: Path) -> dict[str, list[str]]:
    runs = folder / "runs"
    runs.mkdir()
    shutil.copy(NCCL / "all_reduce_perf_8xa100.txt", runs / "all_reduce_perf.txt")
    (folder / "garbage.jsonl").write_text("not json\nat all\n")
    return {
        "capture": [str(NCCL / "sendrecv_perf_8xa100.txt")],
        "two-devices": [str(NCCL / "all_reduce_perf_8xa100.txt"), str(NCCL / "all_gather_perf_16xh100.txt")],
        "folder": [str(runs)],
        "missing": [str(folder / "no-such-results")],
        "garbage": [str(folder / "garbage.jsonl")],
    }


def _nccl_captures(folder: Path) -> dict[str, list[str]]:
    (folder / "slurm-1234.out").write_bytes((NCCL / "all_reduce_perf_8xa100.txt").read_bytes()[:900])
    return {
        "capture": [str(NCCL / "all_reduce_perf_8xa100.txt")],
        "json": [str(NCCL / "all_reduce_perf_8xh100.json")],
        "cut": [str(NCCL / "all_reduce_perf_cut_by_time_limit.txt")],
        "unnamed": [str(folder / "slurm-1234.out")],
        "garbled": [str(NCCL / "garbled_all_reduce_perf_bad_number.txt")],
        "missing": [str(folder / "none.txt")],
    }


def _testbed_jobs(folder: Path) -> dict[str, list[str]]:
    (folder / "held").mkdir()
    (folder / "held" / "collectives.jsonl").write_text(EARLIER)
    return {
        "collectives": ["--", "calibrate.collectives", "--out", str(folder / "tb"), "-e", "64"],
        "held": ["--", "calibrate.collectives", "--out", str(folder / "held")],
        "bad-job-flag": ["--", "calibrate.collectives", "-b", "0"],
        "other-module": ["--", "no.such.module"],
        "none": [],
    }


# --- the commands ----------------------------------------------------------------------------------
Setup = Callable[[pytest.MonkeyPatch], None]


def _no_measuring(module: str, runner: str) -> Setup:
    def setup(monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(importlib.import_module(module), runner, lambda *args, **kwargs: 0)

    return setup


def _fake_memory_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(spec: Any, strategy: str, world: int, *, optimizer: str) -> dict[str, Any]:
        return {"kind": "memory_truth", "model": spec.name, "strategy": strategy, "world_size": world,
                "optimizer": optimizer, "peak_bytes": 1e6, "peak_phase": "backward", "tracked_step_s": 0.1}  # fmt: skip

    monkeypatch.setattr(importlib.import_module("calibrate.memory_truth.measure"), "measure", measure)


def _no_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate.train without training, and without its watchdog (it needs a real stderr)."""
    train = importlib.import_module("calibrate.train.cli")
    monkeypatch.setattr(train, "run_training", lambda config: None)
    monkeypatch.setattr(train.faulthandler, "dump_traceback_later", lambda *args, **kwargs: None)


def _no_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    testbed = importlib.import_module("calibrate.testbed.cli")
    monkeypatch.setattr(testbed, "can_create_namespaces", lambda: None)
    monkeypatch.setattr(testbed, "cleanup", lambda: 0)
    monkeypatch.setattr(testbed.Testbed, "create", lambda self: None)
    monkeypatch.setattr(testbed.Testbed, "destroy", lambda self: [])
    monkeypatch.setattr(testbed, "run_job", lambda *args, **kwargs: 0)


def _no_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = importlib.import_module("calibrate.cluster.cli")

    @contextlib.contextmanager
    def fake_cluster(nodes: int, **kwargs: Any) -> Iterator[Any]:
        yield SimpleNamespace(node_names=[f"node{i}" for i in range(nodes)], conf_path="slurm.conf",
                              testbed=SimpleNamespace(address=lambda i: f"10.213.0.{i + 1}"))  # fmt: skip

    monkeypatch.setattr(cluster, "cluster_unavailable", lambda: None)
    monkeypatch.setattr(cluster, "can_create_namespaces", lambda: None)
    monkeypatch.setattr(cluster, "cleanup", lambda: [])
    monkeypatch.setattr(cluster, "slurm_cluster", fake_cluster)
    monkeypatch.setattr(cluster, "_run", lambda *args: 0)


# name -> (module with main, flags, whether it needs torch, per-example places, setup)
COMMANDS: dict[str, tuple[str, dict[str, Any], bool, Callable[[Path], dict[str, list[str]]], Setup | None]] = {
    "collectives": ("calibrate.collectives.cli", COLLECTIVES, True,
                    lambda f: _folder_outs(f, "collectives.jsonl"),
                    _no_measuring("calibrate.collectives.cli", "run_sweep")),
    "compute": ("calibrate.compute.cli", COMPUTE, True, lambda f: _folder_outs(f, "compute.jsonl"),
                _no_measuring("calibrate.compute.cli", "run_compute")),
    "train": ("calibrate.train.cli", TRAIN, False, _file_outs, _no_watchdog),
    "memory_truth": ("calibrate.memory_truth.cli", MEMORY_TRUTH, True, _file_outs, _fake_memory_truth),
    "fit": ("calibrate.fit.cli", FIT, False,
            lambda f: {f"{i}+{o}": [*ins, *out] for i, ins in _fit_inputs(f).items()
                       for o, out in _file_outs(f, "-o", ".json").items() if "resume" not in o},
            None),
    "nccl_tests": ("calibrate.nccl_tests.parser", NCCL_TESTS, False,
                   lambda f: {f"{c}+{o}": [*caps, *out] for c, caps in _nccl_captures(f).items()
                              for o, out in _file_outs(f, "-o").items() if o in ("new", "held", "folder")},
                   None),
    "testbed": ("calibrate.testbed.cli", TESTBED, False, _testbed_jobs, _no_namespaces),
    "cluster": ("calibrate.cluster.cli", CLUSTER, False,
                lambda f: {"shell": [], "command": ["--", "true"]}, _no_daemons),
}  # fmt: skip


@st.composite
def _argv(draw: st.DrawFn, flags: dict[str, Any], places: list[str]) -> tuple[list[str], str]:
    """Random flags, and the name of the place (output, inputs or job) the example uses."""
    return draw(flag_argv(flags)), draw(st.sampled_from(places))


def _fuzz(name: str, examples: int, monkeypatch: pytest.MonkeyPatch) -> None:
    module, flags, torch_needed, places, setup = COMMANDS[name]
    if torch_needed:
        pytest.importorskip("torch", reason=f"calibrate.{name} imports torch")
    for variable in ("RANK", "SLURM_PROCID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(variable, raising=False)
    main = importlib.import_module(module).main
    if setup is not None:
        setup(monkeypatch)
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as scratch:
        names = sorted(places(Path(scratch)))

    @settings(max_examples=examples, deadline=None, database=None,  # SIGALRM bounds each example
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(_argv(flags, names))
    def one(drawn: tuple[list[str], str]) -> None:
        extra, place = drawn
        with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as scratch:
            folder = Path(scratch)
            argv = [*places(folder)[place], *extra] if name not in ("testbed", "cluster") else [
                *extra, *places(folder)[place]]  # fmt: skip
            with inside(folder):
                code, out, err = run_cli(main, argv, SECONDS_PER_EXAMPLE)
            check_cli_outcome(argv, code, out, err)
            if name == "fit" and code == 0:
                output = Path(argv[argv.index("-o") + 1])
                json.loads(output.read_text(), parse_constant=_no_constant)

    one()


def _no_constant(name: str) -> Any:
    raise AssertionError(f"non-finite number {name} in the profile")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_random_flags_end_cleanly(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fuzz(name, FAST_EXAMPLES, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_many_random_flags_end_cleanly(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fuzz(name, SLOW_EXAMPLES, monkeypatch)
