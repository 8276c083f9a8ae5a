"""ZeRO-1 and ZeRO-2 (Rajbhandari et al. 2020; DeepSpeed stages 1 and 2).

Both keep full fp16/bf16 parameters on every rank and shard the optimizer state (fp32 master
weights and moments) over the N data-parallel ranks, so each rank updates 1/N of the parameters
and the ranks then all-gather the updated parameters. Gradients are reduce-scattered in buckets as
backward produces them (each rank needs only the reduced gradients of its shard); reduce-scatter +
all-gather move the same bytes as one all-reduce (ZeRO paper, section 7.2).

- ZeRO-1 keeps the full gradients (only optimizer state is sharded); with gradient accumulation it
  reduces once, after the last micro-batch.
- ZeRO-2 also shards gradients: a bucket's gradients are freed once reduce-scattered, leaving the
  rank's 1/N shard, so it reduces every micro-batch.

DeepSpeed copies gradients into a reduction bucket before reducing; one bucket of
``bucket_size_bytes`` is counted as a persistent buffer, and the copy-in is a memory copy on the
compute stream (``2 x bytes / memory bandwidth``, as DDP's).
"""

from __future__ import annotations

from simcore.strategies.base import StepContext
from simcore.strategies.ddp import BucketHooks, assign_buckets
from simcore.strategies.passes import (
    add_collective,
    build_microbatch,
    build_quiet_microbatches,
    make_chunks,
    optimizer_temp_bytes,
)
from simcore.strategies.schedule import PlanBuilder, StepPlan

__all__ = ["Zero1Strategy", "Zero2Strategy"]


class _ZeroBucketed:
    name = ""
    description = ""
    shard_grads = False

    def _hooks(self, ctx: StepContext, bucket_of: list[int], micro: int, quiet: int, tag: str) -> BucketHooks:
        if self.shard_grads and ctx.gpus > 1:
            # ZeRO-2: a reduced bucket's gradients are freed, its 1/N shard kept (once).
            return BucketHooks(
                ctx,
                bucket_of,
                "reduce_scatter",
                communicate=True,
                allocate_grads=True,
                free_reduced=True,
                keep_shard=micro == 0,
                tag=tag,
                copy_in=True,
            )
        return BucketHooks(
            ctx,
            bucket_of,
            "reduce_scatter",
            communicate=True,
            allocate_grads=quiet == 0,
            tag=tag,
            copy_in=ctx.gpus > 1,
        )

    def build_plan(self, ctx: StepContext) -> StepPlan:
        cfg, params, n = ctx.config, ctx.workload.params, ctx.gpus
        grads_total = params * cfg.grad_bytes
        builder = PlanBuilder(self.name)
        builder.plan.initial_memory = {
            "params": params * cfg.param_bytes,
            "optimizer": params * cfg.optimizer_bytes / n,
            "buffers": float(cfg.bucket_size_bytes) if n > 1 else 0.0,
            "overhead": cfg.allocator_overhead_bytes,
        }
        bucket_of = assign_buckets(ctx)
        chunks = make_chunks(ctx, bucket_of)
        per_block = make_chunks(ctx, [0] * len(bucket_of))
        k = ctx.accumulation
        # Micro-batches that communicate: the last one (ZeRO-1, or one GPU), every one (ZeRO-2).
        quiet = k - 1 if (not self.shard_grads or n == 1) else 0
        grads_after_quiet = grads_total if not self.shard_grads or n == 1 else 0.0
        last = build_quiet_microbatches(ctx, builder, quiet, [("grads", grads_after_quiet)])
        for micro in range(quiet, k):
            tag = f" [micro-batch {micro + 1}]" if k > 1 else ""
            hooks = self._hooks(ctx, bucket_of, micro, quiet, tag)
            last = build_microbatch(ctx, builder, chunks, hooks, tag, last, per_block)
        held_grads = grads_total / n if self.shard_grads else grads_total
        after = [builder.last_comm] if builder.last_comm is not None else []
        scratch = optimizer_temp_bytes(ctx, params / n, n)
        opt = builder.compute(
            "optimizer step",
            ctx.optimizer_step_s(round(params / n)),
            kind="optimizer",
            after=after,
            on_start=[("temp", scratch)],
            on_end=[("grads", -held_grads), ("temp", -scratch)],
        )
        add_collective(
            ctx,
            builder,
            "all_gather",
            params * cfg.param_bytes,
            ctx.world,
            "all_gather updated parameters",
            after=[opt],
        )
        return builder.plan


class Zero1Strategy(_ZeroBucketed):
    """Optimizer state sharded; full gradients; reduce-scatter then all-gather of parameters."""

    name = "zero1"
    description = "ZeRO-1: optimizer state sharded; bucketed reduce-scatter, all-gather after the step"
    shard_grads = False


class Zero2Strategy(_ZeroBucketed):
    """Optimizer state and gradients sharded."""

    name = "zero2"
    description = "ZeRO-2: optimizer state and gradients sharded; reduce-scatter every micro-batch"
    shard_grads = True
