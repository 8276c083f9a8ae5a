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
torch DDP documentation). DDP on one GPU still builds its reducer and runs it
(the all-reduce of one rank moves nothing).

Precision (:mod:`simcore.compute.precision`): with autocast (``amp``, what DDP users run) the
parameters, gradients, buckets and the all-reduce are fp32; ``amp-compress`` casts each bucket to
the low dtype before the all-reduce and back after (``bf16_compress_hook``: a low-precision copy of
the bucket lives while it is reduced).

Reducer work: the reducer's autograd hook copies each gradient into its bucket as autograd
produces it (``mark_variable_ready_dense``: copy-in, in the backward pass, on the compute stream)
and, unless the buckets are the gradients' views, ``finalize_bucket_dense`` copies the reduced
buckets back into the gradients before the optimizer (copy-out): memory copies,
``2 x bytes / memory bandwidth`` (:meth:`StepContext.copy_time_s`), plus the host's operator
dispatches per parameter tensor (:mod:`simcore.compute.overheads`), which on a GPU cost time only
where they exceed the kernels they overlap (the copy-out runs after the last gradient, so its
dispatches are exposed).

:class:`BucketHooks` is shared with ZeRO-1/2, which reduce the same kind of buckets.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.compute.fp8 import fp8_weight_copy_bytes
from simcore.compute.memory import MemoryChange
from simcore.compute.overheads import framework_overheads
from simcore.compute.precision import Precision
from simcore.step.plan import PlanBuilder, StepPlan
from simcore.strategies.base import StepContext, optimizer_state_bytes
from simcore.strategies.passes import (
    Chunk,
    PassHooks,
    add_collective,
    autocast_extras,
    build_microbatch,
    build_quiet_microbatches,
    make_chunks,
)

__all__ = ["BucketHooks", "DDPStrategy", "assign_buckets", "chunk_param_tensors"]


def assign_buckets(
    ctx: StepContext, grad_bytes: int, bucket_bytes: float | None = None, first_bytes: float | None = None
) -> list[int]:
    """Bucket index per layer, bucket 0 holding the last layers (filled first in backward).

    Caps are in bytes of gradients of ``grad_bytes`` per element (default: the config's DDP caps);
    assigned once per context and caps (every plan of a sweep's context buckets the same)."""
    bucket_cap = ctx.config.bucket_size_bytes if bucket_bytes is None else bucket_bytes
    cap = ctx.config.first_bucket_bytes if first_bytes is None else first_bytes
    known = ctx.memo(
        ("buckets", grad_bytes, bucket_cap, cap), lambda: _buckets(ctx, grad_bytes, bucket_cap, cap)
    )
    return list(known)


def _buckets(ctx: StepContext, grad_bytes: int, bucket_cap: float, cap: float) -> tuple[int, ...]:
    layers = ctx.workload.layers
    bucket_of = [0] * len(layers)
    current, filled = 0, 0.0
    for index in reversed(range(len(layers))):
        bucket_of[index] = current
        if layers[index].params == 0:
            continue
        filled += layers[index].params * grad_bytes
        if filled >= cap:
            current, filled, cap = current + 1, 0.0, bucket_cap
    return tuple(bucket_of)


def _bucket_counts(ctx: StepContext, bucket_of: Sequence[int]) -> tuple[dict[int, int], dict[int, float]]:
    """Per bucket: its layers with parameters, and its parameters (once per context and bucketing)."""

    def count() -> tuple[dict[int, int], dict[int, float]]:
        pending: dict[int, int] = {}
        params: dict[int, float] = {}
        for index, layer in enumerate(ctx.workload.layers):
            if layer.params:
                bucket = bucket_of[index]
                pending[bucket] = pending.get(bucket, 0) + 1
                params[bucket] = params.get(bucket, 0.0) + layer.params
        return pending, params

    return ctx.memo(("bucket counts", tuple(bucket_of)), count)


def chunk_param_tensors(ctx: StepContext, layers: Sequence[int]) -> int:
    """Parameter tensors of ``layers`` (weights and biases)."""
    return ctx.layer_counts(layers)[1]


class BucketHooks(PassHooks):
    """Gradients land in buckets; a full bucket is reduced (all-reduce or reduce-scatter) at once.

    ``allocate_grads``: this micro-batch creates the gradient tensors (the first one does).
    ``free_reduced``: gradients of a reduced bucket are freed, keeping only this rank's shard
    (ZeRO-2); ``keep_shard`` says whether that shard is new (first micro-batch). ``copy_in``: the
    gradients are copied into the flat bucket on the compute stream before it is reduced.
    ``blocking``: the compute stream waits for each reduction (DeepSpeed without ``overlap_comm``).
    ``hook_ops``: host operator dispatches per parameter tensor in backward (the reducer's hooks).
    """

    def __init__(
        self,
        ctx: StepContext,
        bucket_of: Sequence[int],
        op: str,
        precision: Precision,
        *,
        communicate: bool,
        allocate_grads: bool,
        free_reduced: bool = False,
        keep_shard: bool = False,
        micro_batch: int | None = None,
        copy_in: bool = False,
        blocking: bool = False,
        hook_ops: float = 0.0,
    ) -> None:
        self.ctx = ctx
        self.op = op
        self.precision = precision
        self.tie_grad_bytes = precision.bytes("unsharded_grad")
        self.communicate = communicate
        self.allocate_grads = allocate_grads
        self.free_reduced = free_reduced
        self.keep_shard = keep_shard
        self.micro_batch = micro_batch
        self.copy_in = copy_in
        self.blocking = blocking
        self.hook_ops = hook_ops
        self.grad_bytes = precision.bytes("grad")
        self.reduce_bytes = precision.bytes("reduce")
        self.bucket_of = bucket_of
        pending, self.bucket_params = _bucket_counts(ctx, bucket_of)
        self.pending: dict[int, int] = dict(pending)  # counted down as the backward fills buckets
        self.last_reduce: int | None = None

    def _chunk_grad_bytes(self, chunk: Chunk) -> float:
        return self.ctx.layer_counts(chunk.layers)[0] * self.grad_bytes

    def extras(self, ctx: StepContext, chunk: Chunk, phase: str) -> tuple[float, float, list[MemoryChange]]:
        seconds, ops, changes = autocast_extras(ctx, chunk, phase, self.precision)
        if phase == "bwd" and self.communicate and self.hook_ops:
            ops += self.hook_ops * chunk_param_tensors(ctx, chunk.layers)
        return seconds, ops, changes

    def before_backward(
        self, builder: PlanBuilder, layers: Sequence[int], previous_op: int | None
    ) -> list[int]:
        # Without overlap_comm DeepSpeed reduces on the compute stream: backward waits for it.
        return [self.last_reduce] if self.blocking and self.last_reduce is not None else []

    def backward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        if self.allocate_grads or self.free_reduced:
            return [("grads", self._chunk_grad_bytes(chunk))]
        return []

    def backward_done(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        bucket = chunk.group
        self.pending[bucket] = self.pending.get(bucket, 0) - self.ctx.layer_counts(chunk.layers)[2]
        if self.pending[bucket] > 0 or bucket not in self.bucket_params or not self.communicate:
            return
        params = self.bucket_params[bucket]
        held = params * self.grad_bytes
        on_end: list[MemoryChange] = []
        if self.free_reduced:
            on_end = [("grads", -held)]
            if self.keep_shard:
                on_end.append(("grads", held / self.ctx.gpus))
        ready = op
        compress = self.reduce_bytes < self.grad_bytes
        if self.copy_in or compress:
            moved = (held if self.copy_in else 0.0) + (
                params * (self.grad_bytes + self.reduce_bytes) / 2 if compress else 0.0
            )
            ready = builder.compute(
                builder.label("copy gradients into ", "bucket"),
                self.ctx.copy_time_s(moved),
                key=builder.key(group=bucket, micro_batch=self.micro_batch),
                kind="copy",
                after=[op],
            )
        size = params * self.reduce_bytes
        temp: list[MemoryChange] = [("temp", size)] if compress else []
        self.last_reduce = add_collective(
            self.ctx,
            builder,
            self.op,
            size,
            self.ctx.world,
            builder.label(f"{self.op} ", "bucket"),
            key=builder.key(group=bucket, micro_batch=self.micro_batch),
            after=[ready],
            on_start=temp,
            on_end=on_end + ([("temp", -size)] if compress else []),
        )


def _copy_out_s(
    ctx: StepContext, precision: Precision, copies: bool, compress: bool, ops_per_tensor: float
) -> float:
    """The copy of the reduced buckets back into every gradient (and the compression hook's casts),
    over the whole model of ``ctx``: its kernels or its dispatch, the longer."""
    params, tensors, _ = ctx.model_counts()
    grad_bytes = precision.bytes("grad")
    moved = (params * grad_bytes if copies else 0.0) + (
        params * (grad_bytes + precision.bytes("reduce")) / 2 if compress else 0.0
    )
    return ctx.timer_combine(ctx.copy_time_s(moved), ops_per_tensor * tensors, "bwd")


class DDPStrategy:
    """Replicated parameters, gradients and optimizer state; bucketed all-reduce."""

    name = "ddp"
    description = "DDP: full replica per GPU, bucketed gradient all-reduce overlapped with backward"
    framework = "torch-ddp"
    zero_stage = 0
    shard_scope = "world"
    communicates_every_microbatch = False  # no_sync() on all but the last micro-batch

    def assumption_note(self, ctx: StepContext) -> str:
        return ""

    def layer_groups(self, ctx: StepContext) -> list[int]:
        """The bucket of each layer: the plan's only grouping across blocks (see fastpath.fold)."""
        return assign_buckets(ctx, ctx.precision(self).bytes("grad"))

    def build_plan(self, ctx: StepContext) -> StepPlan:
        cfg, params = ctx.config, ctx.model_counts()[0]
        precision = ctx.precision(self)
        grad_bytes = precision.bytes("grad")
        grads_total = params * grad_bytes
        builder = PlanBuilder(self.name)
        builder.plan.fragmentation = cfg.fragmentation(ctx.device_kind)
        builder.plan.initial_memory = {
            "params": params * precision.bytes("param") + fp8_weight_copy_bytes(ctx.workload, cfg.fp8),
            "optimizer": params * optimizer_state_bytes(precision, cfg.optimizer),
            "buffers": 0.0 if cfg.gradient_as_bucket_view else grads_total,
            "overhead": cfg.runtime_overhead_bytes(ctx.device_kind, 1),
        }
        bucket_of = assign_buckets(ctx, grad_bytes)
        chunks = make_chunks(ctx, bucket_of)
        per_block = make_chunks(ctx, [0] * len(bucket_of))
        quiet = ctx.accumulation - 1
        last = build_quiet_microbatches(ctx, builder, quiet, [("grads", grads_total)], precision)
        copies = not cfg.gradient_as_bucket_view
        hook_ops, copy_out_ops = framework_overheads().ddp_tensor_ops
        hooks = BucketHooks(
            ctx, bucket_of, "all_reduce", precision, communicate=True, allocate_grads=quiet == 0,
            copy_in=copies, hook_ops=hook_ops,
        )  # fmt: skip
        last = build_microbatch(ctx, builder, chunks, hooks, None, last, per_block)
        after = [builder.last_comm] if builder.last_comm is not None else []
        compress = precision.bytes("reduce") < grad_bytes
        if copies or compress:
            seconds = _copy_out_s(ctx.whole or ctx, precision, copies, compress, copy_out_ops)
            after = [builder.compute("copy buckets out to gradients", seconds, kind="copy", after=after)]
        step = ctx.optimizer_step(self, params, 1)
        builder.compute(
            "optimizer step",
            step.seconds,
            kind="optimizer",
            after=after,
            on_start=[("temp", step.scratch_bytes)],
            on_end=[("grads", -grads_total), ("temp", -step.scratch_bytes)],
        )
        return builder.plan
