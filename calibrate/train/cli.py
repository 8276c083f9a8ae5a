"""Real training runs to measure: a small CNN or transformer under DDP, FSDP2, ZeRO or a parameter server.

Run it on one process, under torchrun, or from Python::

    python -m calibrate.train --model cnn --strategy ddp --steps 20 --out runs/train.jsonl
    torchrun --nproc-per-node 4 -m calibrate.train --model transformer --strategy ps-async --out runs/t.jsonl

Every rank appends to ``--out`` (JSONL; a ``{rank}`` in the name gives one file per rank, for
file systems without atomic appends). The file holds, per run:

- ``"kind": "provenance"`` (rank 0, first): host, devices, torch/backend versions, threads, argv,
  the full configuration, the strategy's note, and the model's layers (``describe()``) so the
  simulator can build the matching workload;
- ``"kind": "step"`` per step per rank: ``step_time_s``; phases ``forward_s``, ``backward_s``
  (includes the communication torch overlaps with it), ``optimizer_s``, ``comm_s`` (DDP/ZeRO-1:
  time gradient all-reduces were in flight, overlapping backward; PS: push + pull, including SSP
  blocking; FSDP2: none, see :mod:`calibrate.train.strategies`); ``slow_sleep_s`` (the
  straggler's injected delay); ``samples``; ``loss``;
  ``peak_memory_bytes`` with ``memory`` by category and ``memory_source`` (see
  :mod:`calibrate.memory_truth.probe`); ``accuracy`` on the held-out split every ``--eval-every`` steps
  and at the end; PS: ``staleness`` (in updates, one per server), ``staleness_clocks``,
  ``ssp_block_s``. PS servers write ``"role": "server"`` records, one per step of the slowest
  worker, with the staleness of every update they applied in it. Steps of the first ``--warmup``
  steps of a process carry ``"warmup": true``.
- ``"kind": "summary"`` per rank at the end: median step time without warm-up, final accuracy and
  loss; PS: mean, p99 and max staleness (updates), max staleness in clocks, total SSP blocking.

``--slow-rank R:FACTOR`` makes rank R a straggler: it sleeps (FACTOR - 1) x its own compute time
every step (PS workers: after backward, x forward + backward; collective strategies: after
forward, x forward + the previous step's backward, so the delay lands before its gradients are
reduced). Threads: ``--threads``, else 1 per rank when several ranks run, else all CPUs; the
number in force is in the provenance (``threads_per_rank``).

An ``--out`` that already holds records is refused unless ``--resume`` or ``--force`` (append a
new run; readers tell runs apart by ``run_id``) says what to do with them.

``--resume`` continues the last run in ``--out`` with the same configuration from its newest
checkpoint (written every ``--checkpoint-every`` steps beside the output); steps recorded after that
checkpoint are run again, so readers keep the last record per ``(run_id, rank, step)``. It says on
stderr what it found (the run, its step records, the checkpoint it continues from) and any torn
record a killed run left, which it drops before appending.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
from dataclasses import fields
from pathlib import Path

from calibrate.common.launch import launch_rank
from calibrate.common.launcher import supervise
from calibrate.common.prereq import check_record_file, require_torch
from calibrate.common.procs import die_with_launcher
from calibrate.train.config import ALL_STRATEGIES, TrainConfig, check_config
from simcore.cliargs import Parser, int_range, real_range
from simcore.errors import TrainsimError, cli_entry

__all__ = ["check_output", "config_from_args", "launch_local", "main", "run_training"]


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m calibrate.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSONL file the records are appended to")
    p.add_argument("--model", default="cnn", help="cnn | transformer")
    p.add_argument("--strategy", default="ddp", help=" | ".join(ALL_STRATEGIES))
    # Bounds: far above what a CPU testbed job trains (a few hundred steps of a width-16 model) and
    # below what would take days or overflow; each number is checked once, here (simcore.cliargs).
    big = 10**7
    for name, kind, default, help_text in [
        ("steps", int_range(1, big), 20, "training steps"),
        ("batch", int_range(1, 2**20), 16, "samples per worker per step"),
        ("lr", real_range(1e-12, 1e6), 0.1, "SGD learning rate"),
        ("momentum", real_range(0.0, 0.999999), 0.9, "SGD momentum"),
        ("seed", int_range(0, 2**32 - 1), 0, "seed of model init and data"),
        ("width", int_range(1, 2**16), 16, "channels / model width"),
        ("depth", int_range(1, 1024), 2, "CNN stages / transformer blocks"),
        ("heads", int_range(1, 1024), 2, "attention heads"),
        ("seq-len", int_range(1, 2**20), 32, "transformer sequence length"),
        ("vocab", int_range(1, 2**24), 64, "transformer vocabulary"),
        ("image-size", int_range(1, 4096), 16, "CNN image side"),
        ("num-classes", int_range(1, 2**20), 10, "CNN classes"),
        ("noise", real_range(0.0, 1e6), 1.0, "image noise std (task difficulty)"),
        (
            "threads",
            int_range(1, 4096),
            None,
            "torch threads per rank (default: 1 when several ranks, else all)",
        ),
        ("staleness-bound", int_range(0, big), 2, "ps-ssp bound s"),
        ("ps-ranks", int_range(1, 4096), 1, "parameter server ranks"),
        ("eval-every", int_range(0, big), 10, "held-out accuracy every N steps (and at the end)"),
        ("warmup", int_range(0, big), 2, "steps excluded from the summary"),
        ("checkpoint-every", int_range(0, big), 10, "checkpoint every N steps (0: never)"),
        ("timeout-s", real_range(0.1, 1e7, unit="s"), 900.0, "abort the whole job after this long"),
    ]:
        p.add_argument(f"--{name}", type=kind, default=default, help=help_text)
    p.add_argument("--slow-rank", default=None, help="R:FACTOR, rank R sleeps (FACTOR-1) x its compute")
    p.add_argument("--backend", default=None, help="gloo | nccl (default: nccl with CUDA, else gloo)")
    p.add_argument("--resume", action="store_true", help="continue the last matching run in --out")
    p.add_argument("--force", action="store_true", help="append a new run to an --out that holds records")
    return p


def _slow(text: str | None) -> tuple[int, float]:
    if text is None:
        return -1, 1.0
    try:
        rank_text, factor_text = text.split(":")
        rank, factor = int(rank_text), float(factor_text)
    except ValueError:
        raise TrainsimError(f"--slow-rank {text!r}: expected RANK:FACTOR, e.g. 1:3") from None
    if rank < 0 or factor < 1.0:
        raise TrainsimError(f"--slow-rank {text!r}: rank must be >= 0 and factor >= 1")
    return rank, factor


def config_from_args(argv: list[str] | None) -> TrainConfig:
    """Parse and check the command line (raises TrainsimError naming the bad option)."""
    args = vars(_parser().parse_args(argv))
    args["slow_rank"], args["slow_factor"] = _slow(args.pop("slow_rank"))
    config = TrainConfig(**{f.name: args[f.name] for f in fields(TrainConfig) if f.name in args})
    check_config(config)
    return config


def run_training(config: TrainConfig) -> Path:
    """Run ``config`` on this process's rank (call on every rank) and return the output path."""
    from calibrate.train.loop import run  # imports torch: only once the options are known to be good

    return run(config)


def check_output(config: TrainConfig) -> None:
    """This rank's ``--out`` file, before anything is written (see :mod:`calibrate.common.prereq`)."""
    check_record_file(
        config.out.replace("{rank}", str(launch_rank())), resume=config.resume, force=config.force
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    config = config_from_args(argv)
    require_torch("calibrate.train")
    check_output(config)
    die_with_launcher()
    faulthandler.dump_traceback_later(config.timeout_s, exit=True)  # never hang: dump stacks, exit
    try:
        run_training(config)
    finally:
        faulthandler.cancel_dump_traceback_later()
    return 0


def launch_local(
    argv: list[str],
    nproc: int,
    timeout_s: float,
    *,
    via_torchrun: bool = True,
    env: dict[str, str] | None = None,
) -> int:
    """Run ``calibrate.train`` with ``nproc`` local processes; returns the job's exit status.

    ``via_torchrun`` (default): ``python -m torch.distributed.run --standalone`` starts the workers,
    exactly as a user would. Otherwise the ranks are started directly with torchrun's environment
    variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT on a free local
    port), which saves the launcher's own torch import. Either way the job is killed as a whole
    after ``timeout_s`` (exit status 124, as ``timeout`` reports); workers under torchrun also die
    with their launcher (see :func:`calibrate.common.procs.die_with_launcher`).
    """
    if nproc < 1:
        raise TrainsimError(f"nproc must be at least 1, got {nproc}")
    base_env = {**os.environ, **(env or {})}
    if via_torchrun:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "calibrate.train",
            *argv,
        ]
        return supervise([command], timeout_s, envs=[base_env], name="calibrate.train")
    port = _free_port()
    commands: list[list[str]] = []
    envs: list[dict[str, str]] = []
    for rank in range(nproc):
        rank_env = {
            **base_env,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        commands.append([sys.executable, "-m", "calibrate.train", *argv])
        envs.append(rank_env)
    return supervise(commands, timeout_s, envs=envs, name="calibrate.train")


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
