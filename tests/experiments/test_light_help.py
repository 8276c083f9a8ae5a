"""``--help`` from a command's light parser: the same text as its full parser, without the simulator.

A command that names a ``parser`` (:class:`experiments.console.Command`) answers ``--help`` from that
module alone; these tests hold its help equal to what ``main`` prints, its literal copies of
simcore's allowed values equal to simcore's, and the modules it imports free of the step model.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from experiments.bench import args as bench_args
from experiments.console import COMMANDS, run_module
from simcore.collectives import ALGORITHMS
from tests.paths import REPO
from topologies.cliargs import MAX_GPUS

LIGHT = [c for c in COMMANDS.values() if c.parser]
# Modules that --help must not load: the step model, the planner, the parameter server and, for a
# parser without --cluster, the topologies (--cluster's help lists the presets: topologies.cliargs).
HEAVY_PREFIXES = (
    "simcore.step", "simcore.strategies", "simcore.parallel", "simcore.planner", "simcore.paramserver",
    "simcore.fastpath", "simcore.collectives", "simcore.compute", "simcore.whatif.sweep",
)  # fmt: skip
TAKES_A_CLUSTER = {
    "experiments.what_if", "experiments.check_shards", "experiments.staleness_accuracy", "experiments.nccl_sim",
}  # fmt: skip


def test_some_commands_have_a_light_parser() -> None:
    assert {c.module for c in LIGHT} >= {"experiments.plan", "experiments.bench", "experiments.what_if"}


@pytest.mark.parametrize("command", LIGHT, ids=lambda c: c.module)
def test_light_help_is_the_full_parsers_help(command, capsys: pytest.CaptureFixture[str]) -> None:
    module, _, function = command.parser.partition(":")
    light = getattr(importlib.import_module(module), function)().format_help()
    full = importlib.import_module(command.main_module).build_parser().format_help()
    assert light == full
    with pytest.raises(SystemExit) as exit_:
        run_module(command.module, ["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == full


@pytest.mark.parametrize("command", LIGHT, ids=lambda c: c.module)
def test_help_in_a_fresh_interpreter_loads_no_step_model(command) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", command.module, "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "usage:" in done.stdout
    heavy = HEAVY_PREFIXES + (() if command.module in TAKES_A_CLUSTER else ("topologies.",))
    assert not [m for m in imported if m.startswith(heavy)]


def test_an_argument_error_beside_help_is_left_to_main(capsys: pytest.CaptureFixture[str]) -> None:
    # the light parser prints help only where it parses; a bad value is reported by main as always
    with pytest.raises(SystemExit) as exit_:
        run_module("experiments.plan", ["--max-tp", "x", "--help"])
    assert exit_.value.code == 2
    assert "--max-tp" in capsys.readouterr().err


def test_the_bench_parsers_literals_are_simcores() -> None:
    either = sorted(set(ALGORITHMS["all_reduce"]) | set(ALGORITHMS["all_gather"]))
    assert either == bench_args.ALGO_CHOICES
    assert bench_args.MAX_GPUS == MAX_GPUS


@pytest.mark.parametrize(
    "command",
    [c for c in LIGHT if hasattr(importlib.import_module(c.parser.split(":")[0]), "DESCRIPTION")],
    ids=lambda c: c.module,
)
def test_a_light_parsers_description_is_its_commands_first_paragraph(command) -> None:
    light = importlib.import_module(command.parser.partition(":")[0])
    main_doc = importlib.import_module(command.main_module).__doc__ or ""
    assert " ".join(main_doc.split("\n\n")[0].split()) == light.DESCRIPTION


def test_the_paper_reproductions_formats_are_its_reports() -> None:
    from experiments.reproduce_paper.args import FORMATS
    from experiments.reproduce_paper.report import FORMATS as RENDERED

    assert RENDERED == FORMATS


def test_the_nccl_simulators_literals_are_the_collectives() -> None:
    from experiments.nccl_sim import args as nccl_args
    from simcore.collectives import OPS, PROTOCOLS

    assert tuple(OPS) == nccl_args.OPS
    assert tuple(PROTOCOLS) == nccl_args.PROTOCOLS
    assert sorted({name for algos in ALGORITHMS.values() for name in algos}) == nccl_args.ALGO_CHOICES
