"""The body of ``calibrate.train`` on one rank: set up, resume, step, record, summarise.

Kept apart from the command line (:mod:`calibrate.train`) so the CLI module stays a thin, torch-free
parser. Checkpoints live in ``<out without suffix>.ckpt/<run_id>/step<N>.rank<R>.pt``; the newest
two per rank are kept, so a rank killed while writing never leaves its peers without a common step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from calibrate.common.dist import DistContext, init_distributed, set_threads, shutdown
from calibrate.common.records import RecordWriter, provenance, read_records

if TYPE_CHECKING:
    from calibrate.train.cli import TrainConfig

__all__ = ["run", "run_steps", "save_checkpoint"]


def _task(config: TrainConfig) -> Any:
    from calibrate.train.data import ImageTask, TokenTask

    if config.model == "cnn":
        return ImageTask(
            seed=config.seed, num_classes=config.num_classes, image_size=config.image_size, noise=config.noise
        )
    return TokenTask(seed=config.seed, vocab=config.vocab, seq_len=config.seq_len)


def _model(config: TrainConfig) -> torch.nn.Module:
    from calibrate.train.models import build_model

    torch.manual_seed(config.seed)  # identical initial parameters on every rank
    return build_model(
        config.model,
        width=config.width,
        depth=config.depth,
        heads=config.heads,
        seq_len=config.seq_len,
        vocab=config.vocab,
        num_classes=config.num_classes,
        channels=3,
    )


def _out_path(config: TrainConfig, rank: int) -> Path:
    return Path(config.out.replace("{rank}", str(rank)))


def _previous_run(config: TrainConfig, world: int) -> tuple[str | None, bool]:
    """The run id of the last run in ``--out`` with this configuration and world size, and whether
    every rank of it wrote its summary."""
    paths = sorted({_out_path(config, rank) for rank in range(world)})
    records = [record for path in paths for record in read_records(path)]
    run_id = None
    for record in records:
        same = record.get("config") == config.identity() and record.get("world_size") == world
        if record.get("kind") == "provenance" and same:
            run_id = record.get("run_id")
    summarised = {r.get("rank") for r in records if r.get("kind") == "summary" and r.get("run_id") == run_id}
    finished = run_id is not None and summarised >= set(range(world))
    return run_id, finished


def _checkpoint_dir(config: TrainConfig, run_id: str) -> Path:
    out = Path(config.out.replace("{rank}", "all"))
    return out.with_suffix(".ckpt") / run_id


def _saved_steps(directory: Path, rank: int) -> list[int]:
    if not directory.is_dir():
        return []
    suffix = f".rank{rank}.pt"
    return sorted(int(p.name[4 : -len(suffix)]) for p in directory.glob(f"step*{suffix}"))


def save_checkpoint(directory: Path, rank: int, step: int, state: Any) -> None:
    """Write this rank's ``state`` for ``step`` (atomic rename), keeping the newest two."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"step{step}.rank{rank}.pt"
    tmp = target.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, target)
    for old in _saved_steps(directory, rank)[:-2]:
        (directory / f"step{old}.rank{rank}.pt").unlink(missing_ok=True)


def _common_step(directory: Path, ctx: DistContext, has_state: bool) -> int:
    """Newest step every stateful rank has a checkpoint of (0 when none)."""
    mine = _saved_steps(directory, ctx.rank) if has_state else None
    everyone: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    sets = [set(steps) for steps in everyone if steps is not None]
    common = set.intersection(*sets) if sets else set()
    return max(common, default=0)


def _agree_run(config: TrainConfig, ctx: DistContext) -> tuple[str, bool]:
    """Rank 0 decides the run id (new, or the one to resume) and whether it is already finished."""
    from calibrate.train.cli import new_run_id

    decision: list[Any] = [None]
    if ctx.rank == 0:
        run_id, finished = _previous_run(config, ctx.world_size) if config.resume else (None, False)
        decision = [(run_id or new_run_id(config, ctx.world_size), finished)]
    dist.broadcast_object_list(decision, src=0)
    return decision[0]


def run_steps(path: Path, run_id: str, rank: int) -> list[dict[str, Any]]:
    """The step records of one rank of one run, by step, keeping the last of any step recorded twice
    (a resumed run repeats the steps after its checkpoint)."""
    by_step = {
        r["step"]: r
        for r in read_records(path)
        if r.get("kind") == "step" and r.get("run_id") == run_id and r.get("rank") == rank
    }
    return [by_step[step] for step in sorted(by_step)]


def _summary(records: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    timed = [r["step_time_s"] for r in records if not r.get("warmup")]
    staleness = [s for r in records for s in r.get("staleness", []) if s >= 0]
    accuracy = [r["accuracy"] for r in records if r.get("accuracy") is not None]
    summary = {
        **base,
        "kind": "summary",
        "steps_recorded": len(records),
        "median_step_time_s": float(np.median(timed)) if timed else None,
        "final_accuracy": accuracy[-1] if accuracy else None,
        "final_loss": records[-1].get("loss") if records else None,
    }
    if staleness:
        summary["staleness_mean"] = float(np.mean(staleness))
        summary["staleness_p99"] = float(np.percentile(staleness, 99))
        summary["staleness_max"] = int(max(staleness))
        clocks = [s for r in records for s in r.get("staleness_clocks", []) if s >= 0]
        summary["staleness_clocks_max"] = int(max(clocks, default=0))
        summary["ssp_block_s_total"] = float(sum(r.get("ssp_block_s", 0.0) for r in records))
    return summary


def run(config: TrainConfig) -> Path:
    from calibrate.train.cli import _check_world

    ctx = init_distributed(config.backend, timeout_s=config.timeout_s)
    try:
        _check_world(config, ctx.world_size)
        threads = set_threads(config.threads if config.threads else (1 if ctx.world_size > 1 else None))
        run_id, finished = _agree_run(config, ctx)
        path = _out_path(config, ctx.rank)
        if finished:
            if ctx.rank == 0:
                print(f"run {run_id} in {path} is already complete; nothing to resume")
            return path
        _run_rank(config, ctx, run_id, threads, path)
        return path
    finally:
        shutdown()


def _provenance(
    config: TrainConfig, ctx: DistContext, run_id: str, threads: int, start: int, description: dict[str, Any]
) -> dict[str, Any]:
    from calibrate.train.strategies import STRATEGY_NOTES

    note = STRATEGY_NOTES.get(config.strategy, "parameter server: see calibrate.train.param_server")
    return provenance(
        {
            "kind": "provenance",
            "run_id": run_id,
            "job": "calibrate.train",
            "config": config.identity(),
            "world_size": ctx.world_size,
            "local_world_size": ctx.local_world_size,
            "backend": ctx.backend,
            "device": str(ctx.device),
            "threads_per_rank": threads,
            "resumed_from_step": start,
            "strategy_note": note,
            "model_description": description,
        }
    )


def _run_rank(config: TrainConfig, ctx: DistContext, run_id: str, threads: int, path: Path) -> None:
    from calibrate.train.models import describe
    from calibrate.train.runners import build_runner

    task = _task(config)
    test_inputs, test_targets = task.test_set()
    model = _model(config)
    description = describe(model, test_inputs)  # before any wrapper shards the model
    trainer, role, has_state = build_runner(config, ctx, model)
    directory = _checkpoint_dir(config, run_id)
    start = _common_step(directory, ctx, has_state) if config.resume else 0
    if start:
        trainer.load(torch.load(directory / f"step{start}.rank{ctx.rank}.pt") if has_state else None, start)
    with RecordWriter(path) as writer:
        if ctx.rank == 0:
            writer.write(_provenance(config, ctx, run_id, threads, start, description))
        dist.barrier()
        base = {
            "run_id": run_id,
            "strategy": config.strategy,
            "model": config.model,
            "model_params": description["params"],
            "world_size": ctx.world_size,
            "rank": ctx.rank,
            "role": role,
        }
        trainer.run(config, task, (test_inputs, test_targets), start, base, writer, directory)
        writer.write(_summary(run_steps(path, run_id, ctx.rank), base))
