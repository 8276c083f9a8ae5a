"""The body of ``calibrate.train`` on one rank: set up, resume, step, record, summarise.

Kept apart from the command line (:mod:`calibrate.train.cli`) so the CLI module stays a thin,
torch-free parser; checkpoints are :mod:`calibrate.train.checkpoint`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from calibrate.common.dist import DistContext, init_distributed, set_threads, shutdown
from calibrate.common.records import RecordWriter, drop_torn_tail, provenance, read_records
from calibrate.train.checkpoint import checkpoint_dir, checkpoint_path, common_step
from calibrate.train.config import TrainConfig, check_world, new_run_id
from calibrate.train.data import ImageTask, TokenTask
from calibrate.train.models import build_model, describe
from calibrate.train.runners import build_runner
from calibrate.train.strategies import STRATEGY_NOTES

__all__ = ["run", "run_steps"]


def _task(config: TrainConfig) -> Any:
    if config.model == "cnn":
        return ImageTask(
            seed=config.seed, num_classes=config.num_classes, image_size=config.image_size, noise=config.noise
        )
    return TokenTask(seed=config.seed, vocab=config.vocab, seq_len=config.seq_len)


def _model(config: TrainConfig) -> torch.nn.Module:
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


def _agree_run(config: TrainConfig, ctx: DistContext) -> tuple[str, bool]:
    """Rank 0 decides the run id (new, or the one to resume) and whether it is already finished."""
    decision: list[Any] = [None]
    if ctx.rank == 0:
        run_id, finished = _previous_run(config, ctx.world_size) if config.resume else (None, False)
        if config.resume and run_id is None:
            print(f"resume: no earlier run of this configuration on {ctx.world_size} process(es) in "
                  f"{config.out}; starting a new run", file=sys.stderr, flush=True)  # fmt: skip
        decision = [(run_id or new_run_id(config, ctx.world_size), finished)]
    dist.broadcast_object_list(decision, src=0)
    return decision[0]


def _resume_note(config: TrainConfig, world: int, run_id: str, start: int) -> str | None:
    """What ``--resume`` found done and what it runs again, for rank 0 to print (None: nothing)."""
    paths = sorted({_out_path(config, rank) for rank in range(world)})
    steps = [
        r for p in paths for r in read_records(p) if r.get("kind") == "step" and r.get("run_id") == run_id
    ]
    if not steps:
        return None
    last = {
        rank: max((r["step"] for r in steps if r.get("rank") == rank), default=-1) for rank in range(world)
    }
    done = ", ".join(f"rank {rank} to step {step}" for rank, step in last.items() if step >= 0) or "no step"
    again = max(last.values()) - start + 1
    where = f"the checkpoint after step {start - 1}" if start else "step 0 (no checkpoint yet)"
    return (f"resume: run {run_id}: {len(steps)} step record(s) already in {config.out} ({done}); "
            f"continuing from {where}; {max(again, 0)} step(s) after it run again (readers keep the last)")  # fmt: skip


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
    ctx = init_distributed(config.backend, timeout_s=config.timeout_s)
    try:
        check_world(config, ctx.world_size)
        threads = set_threads(config.threads if config.threads else (1 if ctx.world_size > 1 else None))
        path = _out_path(config, ctx.rank)
        if ctx.rank == 0 or "{rank}" in config.out:  # one process cuts a torn line, before others open
            drop_torn_tail(path)
        run_id, finished = _agree_run(config, ctx)
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
    task = _task(config)
    test_inputs, test_targets = task.test_set()
    model = _model(config)
    description = describe(model, test_inputs)  # before any wrapper shards the model
    trainer, role, has_state = build_runner(config, ctx, model)
    directory = checkpoint_dir(config, run_id)
    start = common_step(directory, ctx, has_state) if config.resume else 0
    note = _resume_note(config, ctx.world_size, run_id, start) if config.resume and ctx.rank == 0 else None
    if note:
        print(note, file=sys.stderr, flush=True)
    if start:
        trainer.load(torch.load(checkpoint_path(directory, start, ctx.rank)) if has_state else None, start)
    with RecordWriter(path, drop_torn=False) as writer:  # torn lines were cut in run(), before any opened
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
