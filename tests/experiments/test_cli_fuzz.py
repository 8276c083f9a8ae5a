"""Fuzz every command line with random flag values (hypothesis), in process.

Whatever the flags, a command must end with status 0 or 2, print at most one ``error:`` line,
never a traceback, never a non-finite number on stdout, and finish within a time bound per
example. Values mix valid ones, boundaries, huge sizes and garbage; ``--out`` is drawn from a new
folder, an existing file, a folder with files and an unwritable place. Each command starts from a
cheap base (``--quick``, a small model, ``--measured`` data) so that no example measures with
torch or trains for long.

The default run tries a few examples per command; ``-m slow`` runs many more.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import FLAG, GARBAGE, check_cli_outcome, flag_argv, inside, run_cli
from tests.fuzzing import flag_choice as _choice
from tests.fuzzing import flag_ints as _ints
from tests.paths import REPO

FAST_EXAMPLES = 4
SLOW_EXAMPLES = 60
SECONDS_PER_EXAMPLE = 60  # far above any bounded run here (the slowest base takes ~3 s)
MEASURED = REPO / "experiments" / "results" / "validation"

# Per command: how to call it, the argv every example starts from, and each flag's values.
WHAT_IF = {
    "--model": _choice("gpt2-small", "resnet50-cifar10", "no-such-model"),
    "--cluster": _choice("dgx-a100", "g5.12xlarge", "dgx-a100,g5.12xlarge", "nope.yaml"),
    "--strategies": _choice("ddp", "ddp,fsdp", "ps-sync,ps-async", "zero3,hsdp", "zero4"),
    "--gpus": st.one_of(st.sampled_from(["1", "2", "4", "8", "1,2,4", "100000"]), GARBAGE),
    "--global-batch": _ints(8, 16, 64, 10**9),
    "--micro-batch": _ints(1, 2, 4),
    "--seq-len": _ints(64, 128),
    "--dtype": _choice("fp32", "bf16", "fp16"),
    "--optimizer": _choice("sgd", "adamw"),
    "--bucket-size": _choice("25MiB", "1K", "0", "lots", "2000000G"),
    "--prefetch": _ints(0, 1, 2),
    "--wrap": _choice("per-block", "every-2-layers", "every-x-layers", "0,3"),
    "--steps": _ints(1, 2, 3),
    "--staleness-bound": _ints(0, 3),
    "--ps-shards": _ints(1, 2, 1000),
    "--ps-placement": _choice("colocated", "dedicated", "dedicated:2", "dedicated:100000000", "remote"),
    "--straggler": _choice("1:2", "0:1.5", "99:2", "3", "1:1e308"),
    "--jitter": _choice(
        "compute=lognormal:0.1", "link=lognormal:0.05", "compute=gauss:1", "compute=lognormal:1e6"
    ),
    "--seed": _ints(0, 7),
    "--format": _choice("table", "json", "csv"),
    "--checkpoint-activations": st.just(FLAG),
    "--no-master-weights": st.just(FLAG),
    "--quiet": st.just(FLAG),
}
NCCL_SIM = {
    "--cluster": _choice("dgx-a100", "g5.12xlarge", "hgx-h100"),
    "--topology": _choice("dgx-a100", "pcie-nvl-pairs"),
    "--gpus": _ints(1, 2, 8, 16, 100000),
    "--nodes": _ints(1, 2),
    "--fabric": _choice("leaf-spine", "rail-optimised", "none"),
    "--op": _choice("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv"),
    "-b": _choice("8", "1K", "1M", "0", "2000000G"),
    "-e": _choice("8", "1M", "64M", "1G"),
    "-f": _ints(1, 2, 4),
    "-i": _choice("1", "1M", "0"),
    "-d": _choice("float", "half", "int8"),
    "-r": _ints(0, 1, 9),
    "--algo": _choice("ring", "tree", "nvls", "sharp", "direct", "hierarchical"),
    "--mode": _choice("aggregate", "per-step"),
    "--format": _choice("table", "json"),
}
CHECK_SHARDS = {
    "--model": _choice("gpt2-small", "resnet50-cifar10", "llama2-7b"),
    "--cluster": _choice("dgx-a100", "g5.12xlarge"),
    "--gpus": _ints(1, 2, 8),
    "--wrap": _choice("per-block", "every-3-layers", "every-2-blocks", "0,5,9"),
    "--global-batch": _ints(8, 16, 10**9),
    "--micro-batch": _ints(1, 2),
    "--seq-len": _ints(64, 128),
    "--prefetch": _ints(0, 1, 2),
    "--format": _choice("table", "json"),
}
BENCH = {
    "--gpus": _choice("8", "8,16", "16", "0", "100000"),
    "--size": _choice("1K", "1M", "0", "2000000G"),
    "--algo": _choice("ring", "direct", "tree", "warp"),
    "--repeats": _ints(1, 2, 1000),
    "--format": _choice("table", "json"),
}
REPRODUCE = {"--format": _choice("table", "markdown", "json")}
STALENESS = {
    "--dataset": _choice("digits", "gaussian", "mnist"),
    "--delays": _choice("0,2", "0,1,2", "-1", "0,1000", "a,b"),
    "--modes": _choice("async", "mitigated", "ps-async", "ssp", "hogwild"),
    "--seeds": _ints(1, 2, 1000),
    "--epochs": _ints(1, 2, 100000),
    "--lr": _choice("0.1", "0.5", "0", "-1", "1e9"),
    "--batch-size": _ints(8, 32, 64),
    "--hidden": _ints(0, 8, 16),
    "--target": _choice("0.5", "0.9", "1.5", "97"),
    "--step-time": _choice("async=72ms", "sync=0.1", "async", "turbo=1s", "async=0s"),
}
VALIDATE = {"--notes": _choice("no/such/notes.md"), "--no-testbed": st.just(FLAG)}
VALIDATE_MEMORY = {
    "--sources": _choice("preset", "guess"),
    "--strategies": _choice("ddp", "fsdp", "ddp,fsdp", "zero3"),
}
SHOW = {
    "--gpus": _ints(1, 8, 16, 100000),
    "--nodes": _ints(1, 2, 5000),
    "--fabric": _choice("leaf-spine", "rail-optimised", "none", "torus"),
    "--oversubscription": _choice("1", "2", "2:1", "0.5", "1000"),
}


def _memory_records(folder: Path) -> str:
    lines = (REPO / "experiments" / "results" / "memory" / "memory_truth.jsonl").read_text().splitlines()
    path = folder / "memory_truth.jsonl"
    path.write_text("\n".join(lines[:3]) + "\n")
    return str(path)


def _commands(folder: Path) -> dict[str, tuple[str, list[str], dict[str, Any], bool]]:
    """name -> (module with main, base argv, flag values, whether --out/--force apply)."""
    small = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--strategies", "ddp", "--gpus", "2",
             "--global-batch", "8", "--seq-len", "128"]  # fmt: skip
    return {
        "what_if": ("experiments.what_if.cli", small, WHAT_IF, True),
        "nccl_sim": ("experiments.nccl_sim.cli", ["-b", "1K", "-e", "1M", "-f", "8"], NCCL_SIM, False),
        "check_shards": ("experiments.check_shards.cli", ["--model", "gpt2-small", "--gpus", "2", "--global-batch", "8"], CHECK_SHARDS, False),
        "bench": ("experiments.bench.cli", ["--quick", "--no-what-if", "--quiet"], BENCH, False),
        "reproduce_paper": ("experiments.reproduce_paper.cli", ["--quick", "--quiet"], REPRODUCE, True),
        "staleness_accuracy": ("experiments.staleness_accuracy.cli",
                               ["--quick", "--dataset", "gaussian", "--epochs", "1", "--seeds", "1", "--quiet"],
                               STALENESS, True),
        "validate": ("experiments.validate.cli", ["--quick", "--measured", str(MEASURED)], VALIDATE, True),
        "validate_memory": ("experiments.validate_memory.cli",
                            ["--measured", _memory_records(folder), "--sources", "preset"], VALIDATE_MEMORY, True),
        "show": ("topologies.show", ["dgx-a100"], SHOW, False),
    }  # fmt: skip


def _out_choices(folder: Path) -> list[list[str]]:
    existing_file = folder / "a-file.txt"
    existing_file.write_text("earlier results\n")
    full = folder / "full"
    full.mkdir(exist_ok=True)
    (full / "report.md").write_text("earlier report\n")
    return [
        [],
        ["--out", str(folder / "new")],
        ["--out", str(existing_file)],
        ["--out", str(full)],
        ["--out", str(full), "--force"],
        ["--out", "/proc/no/such/place"],
    ]


@st.composite
def _argv(draw: st.DrawFn, flags: dict[str, Any], outs: list[list[str]] | None) -> list[str]:
    argv = draw(flag_argv(flags))
    return argv + draw(st.sampled_from(outs)) if outs is not None else argv


def _fuzz(name: str, examples: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="trainsim-fuzz-"))
    try:
        module, base, flags, writes = _commands(folder)[name]
        main = importlib.import_module(module).main
        outs = _out_choices(folder) if writes else None

        @settings(
            max_examples=examples,
            deadline=None,  # the SIGALRM bound above is the per-example limit
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            database=None,
        )
        @given(_argv(flags, outs))
        def one(extra: list[str]) -> None:
            argv = [*base, *extra]
            with inside(folder):
                code, out, err = run_cli(main, argv, SECONDS_PER_EXAMPLE)
            check_cli_outcome(argv, code, out, err)
            if code == 0 and "--format" in argv and argv[argv.index("--format") + 1] == "json":
                json.loads(out)  # the JSON a command prints parses

        one()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


COMMANDS = ["what_if", "nccl_sim", "check_shards", "bench", "reproduce_paper", "staleness_accuracy", "validate",
            "validate_memory", "show"]  # fmt: skip


@pytest.mark.parametrize("name", COMMANDS)
def test_random_flags_end_cleanly(name: str) -> None:
    _fuzz(name, FAST_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_many_random_flags_end_cleanly(name: str) -> None:
    _fuzz(name, SLOW_EXAMPLES)


@pytest.mark.parametrize(
    ("out", "ok"),
    [
        ("nan samples/s", False),
        ("step 0.5 s, inf exposed", False),
        ('"time_us": NaN', False),
        ("-Infinity", False),
        ("information on inference, infiniband", True),
        ("samples/s 263.5", True),
    ],
)
def test_the_checker_catches_non_finite_output(out: str, ok: bool) -> None:
    """The fuzz checker itself can fail (no test that cannot fail)."""
    if ok:
        check_cli_outcome([], 0, out, "")
    else:
        with pytest.raises(AssertionError):
            check_cli_outcome([], 0, out, "")


def test_the_checker_catches_tracebacks_and_extra_error_lines() -> None:
    with pytest.raises(AssertionError):
        check_cli_outcome([], 1, "", "Traceback (most recent call last):\n")
    with pytest.raises(AssertionError):
        check_cli_outcome([], 2, "", "error: one\nerror: two\n")
    with pytest.raises(AssertionError):
        check_cli_outcome([], 2, "", "usage: x\n")
