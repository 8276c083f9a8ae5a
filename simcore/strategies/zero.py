"""ZeRO-1 and ZeRO-2 as DeepSpeed runs them (Rajbhandari et al. 2020; ``deepspeed/runtime/zero``).

Both keep full low-precision parameters on every rank and shard the optimizer state (fp32 master
weights and moments, DeepSpeed's FusedAdam on a flat partition) over the N data-parallel ranks;
each rank updates its 1/N and the ranks then all-gather the updated parameters
(``allgather_bucket_size`` elements at a time). DeepSpeed's defaults (``zero/config.py``):
``reduce_bucket_size = allgather_bucket_size = 5e8`` elements, ``contiguous_gradients = True``
(gradients are copied into the reduction bucket as they are produced), ``overlap_comm = (stage ==
3)``: for stages 1 and 2 the reduction runs on the compute stream, so backward waits for it, and
``use_multi_rank_bucket_allreduce = True``: a bucket that spans several ranks' partitions (every
bucket, unless a rank's partition exceeds the bucket) is all-reduced rather than reduced to its
owners.

- ZeRO-1 keeps the full gradients: they accumulate over micro-batches and are reduced once, at the
  accumulation boundary (``reduce_gradients`` after the last backward).
- ZeRO-2 reduces every micro-batch as the buckets fill (backward hooks), keeping only its 1/N
  partition of the reduced gradients.

They coincide when a step has one micro-batch and the whole model fits one reduction bucket: the
same reduction after the same backward, the same peak (ZeRO-2 still holds every gradient in its
bucket until the reduction). With accumulation ZeRO-2 moves the gradients once per micro-batch
and holds 1/N of them between micro-batches; ZeRO-1 moves them once per step and holds them all.
"""

from __future__ import annotations

from simcore.compute.fp8 import fp8_weight_copy_bytes
from simcore.compute.overheads import framework_overheads
from simcore.step.plan import PlanBuilder, RepeatSpan, StepPlan
from simcore.strategies.base import StepContext, optimizer_state_bytes
from simcore.strategies.ddp import BucketHooks, assign_buckets
from simcore.strategies.passes import add_collective, build_microbatch, build_quiet_microbatches, make_chunks

__all__ = ["Zero1Strategy", "Zero2Strategy", "zero_stages_coincide"]


def zero_stages_coincide(ctx: StepContext) -> bool:
    """Whether ZeRO-1 and ZeRO-2 run the same step here (see the module docstring)."""
    return ctx.accumulation == 1 and ctx.model_counts()[0] <= ctx.config.zero_bucket_elements


class _ZeroBucketed:
    name = ""
    description = ""
    framework = "deepspeed"
    zero_stage = 0
    shard_scope = "world"
    communicates_every_microbatch = False
    shard_grads = False

    def assumption_note(self, ctx: StepContext) -> str:
        return ""

    def build_plan(self, ctx: StepContext) -> StepPlan:
        cfg, params, n = ctx.config, ctx.model_counts()[0], ctx.gpus
        precision = ctx.precision(self)
        grad_bytes = precision.bytes("grad")
        grads_total = params * grad_bytes
        bucket_bytes = min(params, cfg.zero_bucket_elements) * grad_bytes
        builder = PlanBuilder(self.name)
        builder.plan.fragmentation = cfg.fragmentation(ctx.device_kind)
        builder.plan.initial_memory = {
            "params": params * precision.bytes("param") + fp8_weight_copy_bytes(ctx.workload, cfg.fp8),
            "optimizer": params * optimizer_state_bytes(precision, cfg.optimizer) / n,
            "buffers": bucket_bytes if n > 1 else 0.0,  # the contiguous reduction bucket
            "overhead": cfg.runtime_overhead_bytes(ctx.device_kind, 1),
        }
        bucket_of = assign_buckets(
            ctx, grad_bytes, cfg.zero_bucket_elements * grad_bytes, cfg.zero_bucket_elements * grad_bytes
        )
        chunks = make_chunks(ctx, bucket_of)
        per_block = make_chunks(ctx, [0] * len(bucket_of))
        k = ctx.accumulation
        # Micro-batches that communicate: the last one (ZeRO-1, or one GPU), every one (ZeRO-2).
        quiet = k - 1 if (not self.shard_grads or n == 1) else 0
        grads_after_quiet = grads_total if not self.shard_grads or n == 1 else 0.0
        last = build_quiet_microbatches(ctx, builder, quiet, [("grads", grads_after_quiet)], precision)
        overlap = cfg.zero_overlap_comm if cfg.zero_overlap_comm is not None else False
        hook_ops = framework_overheads().zero_tensor_ops[0]
        built: tuple[tuple[bool, bool], RepeatSpan] | None = None  # the last micro-batch's settings, span
        for micro in range(quiet, k):
            number = micro + 1 if k > 1 else None  # labels name micro-batches only when there are several
            settings = ((quiet == 0 and micro == 0) or self.shard_grads, micro == 0)  # the hooks' that vary
            if built is not None and built[0] == settings:  # the same hooks: the last one renumbered
                span = builder.repeat(built[1], last)
                if span is not None:
                    built, last = (settings, span), span.last
                    continue
            start = len(builder.plan.ops)
            hooks = BucketHooks(
                ctx, bucket_of, "all_reduce", precision, communicate=n > 1, allocate_grads=settings[0],
                free_reduced=self.shard_grads and n > 1, keep_shard=settings[1], micro_batch=number,
                copy_in=n > 1, blocking=not overlap, hook_ops=hook_ops,
            )  # fmt: skip
            previous, last = last, build_microbatch(ctx, builder, chunks, hooks, number, last, per_block)
            built = (settings, RepeatSpan(start, len(builder.plan.ops), previous, last, number))
        held_grads = grads_total / n if self.shard_grads and n > 1 else grads_total
        after = [builder.last_comm] if builder.last_comm is not None else []
        step = ctx.optimizer_step(self, params / n, n, flat=True)
        opt = builder.compute(
            "optimizer step",
            step.seconds,
            kind="optimizer",
            after=after,
            on_start=[("temp", step.scratch_bytes)],
            on_end=[("grads", -held_grads), ("temp", -step.scratch_bytes)],
        )
        gathered, chunk, previous = float(params), float(cfg.zero_allgather_bucket_elements), opt
        index = 0
        while gathered > 0:
            size = min(gathered, chunk)
            previous = add_collective(
                ctx, builder, "all_gather", size * precision.bytes("param"), ctx.world,
                f"all_gather updated parameters{f' {index}' if params > chunk else ''}", after=[previous],
            )  # fmt: skip
            gathered -= size
            index += 1
        return builder.plan


class Zero1Strategy(_ZeroBucketed):
    """Optimizer state sharded; full gradients reduced once per step; all-gather of parameters."""

    name = "zero1"
    description = "ZeRO-1: optimizer state sharded; bucketed gradient reduction, all-gather after the step"
    zero_stage = 1
    communicates_every_microbatch = False  # one reduction after the last micro-batch
    shard_grads = False


class Zero2Strategy(_ZeroBucketed):
    """Optimizer state and gradients sharded."""

    name = "zero2"
    description = "ZeRO-2: optimizer state and gradients sharded; gradients reduced every micro-batch"
    zero_stage = 2
    communicates_every_microbatch = True
    shard_grads = True

    def assumption_note(self, ctx: StepContext) -> str:
        if not zero_stages_coincide(ctx):
            return ""
        return (
            "zero2 runs the same step as zero1 here: one micro-batch per step and the whole model "
            "in one reduction bucket, so sharding the gradients frees nothing before the reduction"
        )
