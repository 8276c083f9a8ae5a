"""The per-rank step loops of ``calibrate.train``: data-parallel ranks, PS workers and PS servers.

Each runner writes one ``"kind": "step"`` record per step (see :mod:`calibrate.train` for the
fields), checkpoints its state every ``--checkpoint-every`` steps and returns its records for the
summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from calibrate.common.dist import DistContext
from calibrate.common.records import RecordWriter
from calibrate.train.checkpoint import save_checkpoint
from calibrate.train.config import TrainConfig
from calibrate.train.param_server import PsLayout, run_server, shard_ranges
from calibrate.train.param_server_worker import PsWorker, flat_parameters
from calibrate.train.strategies import loss_for, make_trainer

__all__ = ["build_runner"]

Test = tuple[torch.Tensor, torch.Tensor]


def _due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and (step + 1) % every == 0)


def _step_record(
    base: dict[str, Any], step: int, step_time_s: float, result: Any, samples: int, warmup: bool
) -> dict[str, Any]:
    record = {
        **base,
        "kind": "step",
        "step": step,
        "step_time_s": step_time_s,
        "forward_s": result.forward_s,
        "backward_s": result.backward_s,
        "optimizer_s": result.optimizer_s,
        "comm_s": result.comm_s,
        "slow_sleep_s": result.slow_sleep_s,
        "samples": samples,
        "loss": result.loss,
        "peak_memory_bytes": result.memory.get("peak"),
        "memory": result.memory,
        "memory_source": result.memory_source,
        "warmup": warmup,
    }
    record.update(result.extra)
    return record


class _StepLoop:
    """Shared loop of ranks that train: data shard, timing, records, accuracy, checkpoints."""

    trainer: Any
    shard: int
    num_shards: int
    has_state = True

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx

    def load(self, state: Any, start: int) -> None:
        with torch.no_grad():
            for tensor, saved in zip(self.trainer.state_tensors(), state, strict=True):
                tensor.copy_(saved)

    def state(self) -> Any:
        return [t.detach().clone() for t in self.trainer.state_tensors()]

    def run(
        self,
        config: TrainConfig,
        task: Any,
        test: Test,
        start: int,
        base: dict[str, Any],
        writer: RecordWriter,
        directory: Path,
    ) -> list[dict[str, Any]]:
        slow = config.slow_factor if self.ctx.rank == config.slow_rank else 1.0
        last, records = config.steps - 1, []
        for step in range(start, config.steps):
            inputs, targets = task.train_batch(step, config.batch, self.shard, self.num_shards)
            begin = time.perf_counter()
            result = self.trainer.train_step(
                inputs,
                targets,
                step=step,
                slow_factor=slow,
                track_memory=step == start and self.ctx.device.type == "cpu",
            )
            elapsed = time.perf_counter() - begin
            record = _step_record(base, step, elapsed, result, len(inputs), step < start + config.warmup)
            if _due(step, config.eval_every, last):
                record["accuracy"] = self.trainer.accuracy(*test)
            writer.write(record)
            records.append(record)
            if self.has_state and _due(step, config.checkpoint_every, -1) and config.checkpoint_every:
                save_checkpoint(directory, self.ctx.rank, step + 1, self.state())
        self.finish()
        return records

    def finish(self) -> None:
        """What a rank does after its last step (PS workers say goodbye)."""


class CollectiveRunner(_StepLoop):
    def __init__(self, config: TrainConfig, ctx: DistContext, model: torch.nn.Module) -> None:
        super().__init__(ctx)
        self.trainer = make_trainer(
            config.strategy,
            model,
            model_name=config.model,
            device=ctx.device,
            world=ctx.world_size,
            lr=config.lr,
            momentum=config.momentum,
        )
        self.shard, self.num_shards = ctx.rank, ctx.world_size


class PsWorkerRunner(_StepLoop):
    has_state = False

    def __init__(
        self, config: TrainConfig, ctx: DistContext, model: torch.nn.Module, layout: Any, group: Any
    ) -> None:
        super().__init__(ctx)
        self.trainer = PsWorker(model, layout, loss_for(config.model), ctx.device, group)
        self.shard, self.num_shards = layout.worker_index(ctx.rank), len(layout.workers)

    def load(self, state: Any, start: int) -> None:
        """Nothing to load: the servers send the resumed parameters."""

    def finish(self) -> None:
        self.trainer.shutdown()


class PsServerRunner:
    """A server rank: serves its parameter range and records each step of the slowest worker."""

    has_state = True

    def __init__(
        self, config: TrainConfig, ctx: DistContext, model: torch.nn.Module, layout: Any, group: Any
    ) -> None:
        self.ctx, self.layout, self.group = ctx, layout, group
        flat = flat_parameters(model)
        lo, hi = shard_ranges(flat.numel(), layout.servers)[ctx.rank]
        self.params = flat[lo:hi].clone()
        self.momentum_buffer = torch.zeros_like(self.params)
        self.version = 0

    def load(self, state: Any, start: int) -> None:
        self.params, self.momentum_buffer, self.version = state["params"], state["momentum"], state["version"]

    def run(
        self,
        config: TrainConfig,
        task: Any,
        test: Test,
        start: int,
        base: dict[str, Any],
        writer: RecordWriter,
        directory: Path,
    ) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        on_round = self._on_round(config, start, base, writer, directory, records)
        run_server(
            self.params,
            mode=config.strategy.removeprefix("ps-"),
            layout=self.layout,
            steps=config.steps,
            start_step=start,
            lr=config.lr,
            momentum=config.momentum,
            staleness_bound=config.staleness_bound,
            group=self.group,
            version=self.version,
            momentum_buffer=self.momentum_buffer,
            on_round=on_round,
        )
        return records

    def _on_round(
        self,
        config: TrainConfig,
        start: int,
        base: dict[str, Any],
        writer: RecordWriter,
        directory: Path,
        records: list[dict[str, Any]],
    ) -> Callable[..., None]:
        seen = {"updates": 0, "holds": 0, "time": time.perf_counter()}

        def on_round(clock: int, stats: Any, state: Any) -> None:
            now, updates = time.perf_counter(), len(stats.staleness)
            record = {
                **base,
                "kind": "step",
                "step": clock - 1,
                "step_time_s": now - seen["time"],
                "staleness": stats.staleness[seen["updates"] : updates],
                "staleness_clocks": stats.staleness_clocks[seen["updates"] : updates],
                "ssp_hold_s": stats.hold_s[seen["holds"] :],
                "version": state.version,
                "apply_s_total": stats.apply_s,
                "wait_s_total": stats.wait_s,
                "warmup": clock - 1 < start + config.warmup,
            }
            seen.update(updates=updates, holds=len(stats.hold_s), time=now)
            writer.write(record)
            records.append(record)
            if config.checkpoint_every and clock % config.checkpoint_every == 0:
                save_checkpoint(
                    directory,
                    self.ctx.rank,
                    clock,
                    {
                        "params": state.params.clone(),
                        "momentum": state.momentum_buffer.clone(),
                        "version": state.version,
                    },
                )

        return on_round


def build_runner(config: TrainConfig, ctx: DistContext, model: torch.nn.Module) -> tuple[Any, str, bool]:
    """The runner for this rank, its role ("worker" or "server") and whether it has state to save."""
    if not config.strategy.startswith("ps-"):
        return CollectiveRunner(config, ctx, model), "worker", True
    layout = PsLayout(world_size=ctx.world_size, servers=config.ps_ranks)
    group = dist.new_group(backend="gloo") if ctx.backend != "gloo" else None
    if layout.is_server(ctx.rank):
        return PsServerRunner(config, ctx, model, layout, group), "server", True
    return PsWorkerRunner(config, ctx, model, layout, group), "worker", False
