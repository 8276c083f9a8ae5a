"""``trainsim``: one console script whose subcommands are the ``python -m`` entry points.

    trainsim what-if --gpus 16              # = python -m experiments.what_if --gpus 16
    trainsim nccl-sim --cluster dgx-a100    # = python -m experiments.nccl_sim --cluster dgx-a100
    trainsim calibrate-fit runs/ -o profile.json

The rule: ``python -m experiments.X_Y`` is ``trainsim X-Y``, ``python -m calibrate.X_Y`` is
``trainsim calibrate-X-Y`` and ``python -m topologies.show`` is ``trainsim show``. A subcommand
takes the same flags and prints the same output as its module (only the usage line names
``trainsim``). ``trainsim --help`` lists them without importing any: a subcommand's module is
imported only when it runs, so the list shows at once. A command whose ``Command.parser`` names its
parser's own module answers ``--help`` from that module alone (:func:`run_module`, which its
``python -m`` entry calls too), so the simulator is not imported to print the flags.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from simcore.cliargs import PROG
from simcore.errors import TrainsimError

__all__ = ["COMMANDS", "Command", "main", "run_module"]


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: the ``python -m`` module it mirrors, where its ``main`` is, one line of help."""

    module: str
    main_module: str
    summary: str
    # "module:function" building the command's parser without importing the simulator ("" where
    # its main module is light already): what answers --help (:func:`run_module`)
    parser: str = ""
    # a lighter main module for the runs its ``handles(args)`` accepts (the same output; it leaves
    # out what only some flags need, so the common run starts sooner); "" where there is none
    plain_main: str = ""


COMMANDS: dict[str, Command] = {
    "what-if": Command("experiments.what_if", "experiments.what_if.cli",
                       "which data-parallel strategy for a model on a cluster, and why (the main job)",
                       "experiments.what_if.args:build_parser", "experiments.what_if.plain"),
    "nccl-sim": Command("experiments.nccl_sim", "experiments.nccl_sim.cli",
                        "simulated collectives, printed like nccl-tests",
                        "experiments.nccl_sim.args:build_parser"),
    "show": Command("topologies.show", "topologies.show",
                    "what a cluster preset or file contains: devices, links, bandwidths"),
    "check-shards": Command("experiments.check_shards", "experiments.check_shards.cli",
                            "whether FSDP wrapping units split transformer blocks, and the cost",
                            "experiments.check_shards.args:build_parser"),
    "staleness-accuracy": Command("experiments.staleness_accuracy", "experiments.staleness_accuracy.cli",
                                  "what stale gradients cost in accuracy and time to accuracy",
                                  "experiments.staleness_accuracy.args:build_parser"),
    "validate": Command("experiments.validate", "experiments.validate.cli",
                        "predicted against measured step time on real training runs",
                        "experiments.validate.args:build_parser"),
    "validate-memory": Command("experiments.validate_memory", "experiments.validate_memory.cli",
                               "the memory model against PyTorch's own accounting",
                               "experiments.validate_memory.args:build_parser"),
    "validate-published": Command("experiments.validate_published", "experiments.validate_published.cli",
                                  "every published GPU measurement it can express, predicted vs measured",
                                  "experiments.validate_published.args:build_parser"),
    "validate-parallel": Command("experiments.validate_parallel", "experiments.validate_parallel.cli",
                                 "tensor/pipeline/3-D layouts against Megatron-LM's published runs",
                                 "experiments.validate_parallel.args:build_parser"),
    "plan": Command("experiments.plan", "experiments.plan.cli",
                    "the best layouts per GPU count, the Pareto frontier and the cost",
                    "experiments.plan.args:build_parser"),
    "reproduce-paper": Command("experiments.reproduce_paper", "experiments.reproduce_paper.cli",
                               "the seed paper's claims against the simulator, one by one",
                               "experiments.reproduce_paper.args:build_parser"),
    "bench": Command("experiments.bench", "experiments.bench.cli",
                     "wall time and event counts of the simulator itself", "experiments.bench.args:build_parser"),
    "calibrate-collectives": Command("calibrate.collectives", "calibrate.collectives.cli",
                                     "measure collectives (torchrun job, nccl-tests-like sweep)"),
    "calibrate-compute": Command("calibrate.compute", "calibrate.compute.cli",
                                 "measure matmuls, memory copies and layers (torchrun job)"),
    "calibrate-fit": Command("calibrate.fit", "calibrate.fit.cli",
                             "fit measurements and nccl-tests logs into a calibration profile"),
    "calibrate-nccl-tests": Command("calibrate.nccl_tests", "calibrate.nccl_tests.parser",
                                    "import nccl-tests logs as tidy rows"),
    "calibrate-memory-truth": Command("calibrate.memory_truth", "calibrate.memory_truth.cli",
                                      "per-rank memory of real DDP/FSDP2 steps under torch's trackers"),
    "calibrate-train": Command("calibrate.train", "calibrate.train.cli",
                               "real DDP, FSDP2, ZeRO and parameter-server training to validate against"),
    "calibrate-testbed": Command("calibrate.testbed", "calibrate.testbed.cli",
                                 "emulate a multi-node cluster on one Linux machine (root)"),
    "calibrate-cluster": Command("calibrate.cluster", "calibrate.cluster.cli",
                                 "a real Slurm cluster of emulated nodes on one Linux machine (root)"),
    "calibrate-gpu-suite": Command("calibrate.gpu_suite", "calibrate.gpu_suite.cli",
                                   "one prepared GPU run of what the compute model needs, predicted vs measured",
                                   "calibrate.gpu_suite.args:build_parser"),
}  # fmt: skip


def _help() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: trainsim COMMAND [ARGS...]     (trainsim COMMAND --help for its flags)",
        "",
        "Predict distributed deep-learning training before paying for a cluster.",
        "",
        "commands (each is also python -m MODULE):",
    ]
    lines += [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    return "\n".join(lines)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"trainsim {version('trainsim')}"
    except PackageNotFoundError:
        return "trainsim (not installed)"


def _asks_help(args: list[str]) -> bool:
    """Whether ``args`` ask for ``--help`` (before a ``--`` that ends the options)."""
    options = args[: args.index("--")] if "--" in args else args
    return "-h" in options or "--help" in options


def _help_only(command: Command, args: list[str]) -> None:
    """Print the command's help from its light parser (``SystemExit``); return where that parser
    does not answer (an error in the arguments: the command's ``main`` reports it as it always does)."""
    module, _, function = command.parser.partition(":")
    build = cast("Callable[[], argparse.ArgumentParser]", getattr(importlib.import_module(module), function))
    with contextlib.suppress(TrainsimError):
        build().parse_args(args)


def _main_module(command: Command, args: list[str]) -> str:
    """The command's plain main module where it handles ``args``, else its full one."""
    if command.plain_main:
        plain = importlib.import_module(command.plain_main)
        if plain.handles(args):
            return command.plain_main
    return command.main_module


def _run(command: Command, args: list[str]) -> int:
    try:  # Ctrl-C while the simulator is imported (seconds on a busy machine): one line, as in main
        if command.parser and _asks_help(args):
            _help_only(command, args)
        run = cast("Callable[[list[str]], int]", importlib.import_module(_main_module(command, args)).main)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(run(args) or 0)


def run_module(module: str, argv: list[str] | None = None) -> int:
    """``python -m MODULE ARGS``: ``--help`` from the command's parser alone where it names one (the
    simulator is not imported to print it), anything else by the command's ``main``."""
    command = next(c for c in COMMANDS.values() if c.module == module)
    return _run(command, list(sys.argv[1:] if argv is None else argv))


def main(argv: list[str] | None = None) -> int:
    """Run ``trainsim COMMAND ARGS...``: the subcommand's own ``main(ARGS)``, or the list of commands."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(_help(), file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help", "help"):
        print(_help())
        return 0
    if args[0] == "--version":
        print(_version())
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"error: unknown command {args[0]!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    token = PROG.set(f"trainsim {args[0]}")
    try:
        return _run(command, args[1:])
    finally:
        PROG.reset(token)


if __name__ == "__main__":
    raise SystemExit(main())
