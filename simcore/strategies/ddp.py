"""DDP: a full replica per GPU; gradient buckets all-reduced while backward continues.

As torch.nn.parallel.DistributedDataParallel does it (PyTorch "DDP notes" and Li et al., "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020): parameters are
assigned to buckets in reverse order (the first bucket capped at ``first_bucket_bytes``, the
others at ``bucket_size_bytes``: torch's defaults, :data:`simcore.strategies.base.DDP_BUCKET_BYTES`); a
bucket is all-reduced as soon as backward has produced all its gradients, on a communication
stream that overlaps the rest of backward; the optimizer steps after the last bucket. With gradient
accumulation, all micro-batches but the last run under ``no_sync()`` (no communication). Bucket
memory: unless ``gradient_as_bucket_view=True``, the buckets are a second copy of the gradients
("gradient_as_bucket_view ... the saved memory size will be equal to the total gradients size",
torch DDP documentation).

Bucket copies: without ``gradient_as_bucket_view`` the reducer copies each gradient into its
bucket as autograd produces it (``mark_variable_ready_dense``: copy-in, in the backward pass, on
the compute stream) and the reduced bucket back into the gradients before the optimizer
(``finalize_bucket_dense``: copy-out); both are memory copies, ``2 x bytes / memory bandwidth``
(:meth:`StepContext.copy_time_s`). With bucket views neither copy happens.

:class:`BucketHooks` is shared with ZeRO-1/2, which reduce-scatter the same buckets.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.compute.memory import MemoryChange
from simcore.strategies.base import StepContext
from simcore.strategies.passes import (
    Chunk,
    PassHooks,
    add_collective,
    build_microbatch,
    build_quiet_microbatches,
    make_chunks,
    optimizer_temp_bytes,
)
from simcore.strategies.schedule import PlanBuilder, StepPlan

__all__ = ["BucketHooks", "DDPStrategy", "assign_buckets"]


def assign_buckets(ctx: StepContext) -> list[int]:
    """Bucket index per layer, bucket 0 holding the last layers (filled first in backward)."""
    layers = ctx.workload.layers
    grad_bytes = ctx.config.grad_bytes
    bucket_of = [0] * len(layers)
    current, filled, cap = 0, 0, ctx.config.first_bucket_bytes
    for index in reversed(range(len(layers))):
        bucket_of[index] = current
        if layers[index].params == 0:
            continue
        filled += layers[index].params * grad_bytes
        if filled >= cap:
            current, filled, cap = current + 1, 0, ctx.config.bucket_size_bytes
    return bucket_of


class BucketHooks(PassHooks):
    """Gradients land in buckets; a full bucket is reduced (all-reduce or reduce-scatter) at once.

    ``allocate_grads``: this micro-batch creates the gradient tensors (the first one does).
    ``free_reduced``: gradients of a reduced bucket are freed, keeping only this rank's shard
    (ZeRO-2); ``keep_shard`` says whether that shard is new (first micro-batch). ``copy_in``: the
    gradients are copied into the flat bucket on the compute stream before it is reduced.
    """

    def __init__(
        self,
        ctx: StepContext,
        bucket_of: Sequence[int],
        op: str,
        *,
        communicate: bool,
        allocate_grads: bool,
        free_reduced: bool = False,
        keep_shard: bool = False,
        tag: str = "",
        copy_in: bool = False,
    ) -> None:
        self.ctx = ctx
        self.op = op
        self.communicate = communicate
        self.allocate_grads = allocate_grads
        self.free_reduced = free_reduced
        self.keep_shard = keep_shard
        self.tag = tag
        self.copy_in = copy_in
        layers = ctx.workload.layers
        self.bucket_of = bucket_of
        self.pending: dict[int, int] = {}
        self.bucket_bytes: dict[int, float] = {}
        for index, layer in enumerate(layers):
            if layer.params:
                bucket = bucket_of[index]
                self.pending[bucket] = self.pending.get(bucket, 0) + 1
                self.bucket_bytes[bucket] = (
                    self.bucket_bytes.get(bucket, 0.0) + layer.params * ctx.config.grad_bytes
                )

    def _chunk_grad_bytes(self, chunk: Chunk) -> float:
        layers = self.ctx.workload.layers
        return sum(layers[i].params for i in chunk.layers) * self.ctx.config.grad_bytes

    def backward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        if self.allocate_grads or self.free_reduced:
            return [("grads", self._chunk_grad_bytes(chunk))]
        return []

    def backward_done(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        layers = self.ctx.workload.layers
        bucket = chunk.group
        self.pending[bucket] = self.pending.get(bucket, 0) - sum(1 for i in chunk.layers if layers[i].params)
        if self.pending[bucket] > 0 or bucket not in self.bucket_bytes or not self.communicate:
            return
        size = self.bucket_bytes[bucket]
        on_end: list[MemoryChange] = []
        if self.free_reduced:
            on_end = [("grads", -size)]
            if self.keep_shard:
                on_end.append(("grads", size / self.ctx.gpus))
        ready = op
        if self.copy_in:
            ready = builder.compute(
                f"copy gradients into bucket {bucket}{self.tag}",
                self.ctx.copy_time_s(size),
                kind="copy",
                after=[op],
            )
        add_collective(
            self.ctx,
            builder,
            self.op,
            size,
            self.ctx.world,
            f"{self.op} bucket {bucket}{self.tag}",
            after=[ready],
            on_end=on_end,
        )


class DDPStrategy:
    """Replicated parameters, gradients and optimizer state; bucketed all-reduce."""

    name = "ddp"
    description = "DDP: full replica per GPU, bucketed gradient all-reduce overlapped with backward"

    def build_plan(self, ctx: StepContext) -> StepPlan:
        cfg, params = ctx.config, ctx.workload.params
        grads_total = params * cfg.grad_bytes
        builder = PlanBuilder(self.name)
        builder.plan.initial_memory = {
            "params": params * cfg.param_bytes,
            "optimizer": params * cfg.optimizer_bytes,
            "buffers": 0.0 if cfg.gradient_as_bucket_view else grads_total,
            "overhead": cfg.allocator_overhead_bytes,
        }
        bucket_of = assign_buckets(ctx)
        chunks = make_chunks(ctx, bucket_of)
        per_block = make_chunks(ctx, [0] * len(bucket_of))
        quiet = ctx.accumulation - 1
        last = build_quiet_microbatches(ctx, builder, quiet, [("grads", grads_total)])
        copies = not cfg.gradient_as_bucket_view and ctx.gpus > 1
        hooks = BucketHooks(
            ctx, bucket_of, "all_reduce", communicate=True, allocate_grads=quiet == 0, copy_in=copies
        )
        last = build_microbatch(ctx, builder, chunks, hooks, "", last, per_block)
        after = [builder.last_comm] if builder.last_comm is not None else []
        if copies:
            after = [builder.compute("copy buckets out to gradients", ctx.copy_time_s(grads_total),
                                     kind="copy", after=after)]  # fmt: skip
        scratch = optimizer_temp_bytes(ctx, params, 1)
        builder.compute(
            "optimizer step",
            ctx.optimizer_step_s(params),
            kind="optimizer",
            after=after,
            on_start=[("temp", scratch)],
            on_end=[("grads", -grads_total), ("temp", -scratch)],
        )
        return builder.plan
