"""Forward and backward passes as compute operations, with hooks where strategies add communication.

The layers of a micro-batch are cut into *chunks*: maximal runs of consecutive layers in the same
block and the same strategy group (an FSDP unit, a DDP bucket). A chunk is one compute operation
per pass, so a strategy can hang a collective on the moment a chunk starts or ends. Activations a
chunk saves are allocated when its forward ends and freed when its backward ends. With activation
checkpointing a block keeps only its input during forward and recomputes its activations (one
"recompute" operation for the whole block, before the block's backward).

Tied parameters (:class:`~simcore.workload.types.ParameterTie`): each use's backward produces a partial
gradient of the whole shared tensor, held (``temp``) until the last use in backward, where autograd
sums the partials into a new tensor that becomes the gradient: for that moment the partials and
their sum coexist (GPT-2's tied embedding: 3 x its size with torch's autograd), then the partials
are freed. A use between the first and the last adds its partial to the running sum the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.memory import MemoryChange, cross_entropy_working_bytes
from simcore.dtypes import DTYPE_BYTES
from simcore.step.plan import NO_KEY, Label, OpKey, PlanBuilder
from simcore.strategies.base import StepContext

if TYPE_CHECKING:
    from simcore.compute.precision import Precision

__all__ = [
    "Chunk",
    "PassHooks",
    "add_collective",
    "build_microbatch",
    "build_quiet_microbatches",
    "make_chunks",
]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive layers of one block (or outside blocks) and one strategy group."""

    layers: tuple[int, ...]
    block: int
    group: int
    label: str


def make_chunks(ctx: StepContext, group_of_layer: Sequence[int]) -> list[Chunk]:
    """Cut the layers into chunks: a new chunk wherever the block or the group changes (once per
    grouping for the context's workload: every plan of a sweep cuts the same ones)."""
    groups = tuple(group_of_layer)
    return list(ctx.memo(("chunks", groups), lambda: _make_chunks(ctx, groups)))


def _make_chunks(ctx: StepContext, group_of_layer: Sequence[int]) -> tuple[Chunk, ...]:
    layers = ctx.workload.layers
    runs: list[list[int]] = []
    for index, layer in enumerate(layers):
        if (
            runs
            and layers[runs[-1][-1]].block == layer.block
            and group_of_layer[runs[-1][-1]] == group_of_layer[index]
        ):
            runs[-1].append(index)
        else:
            runs.append([index])
    parts: dict[int, int] = {}
    for run in runs:
        parts[layers[run[0]].block] = parts.get(layers[run[0]].block, 0) + 1
    seen: dict[int, int] = {}
    chunks: list[Chunk] = []
    for run in runs:
        block = layers[run[0]].block
        if block >= 0:
            label = ctx.workload.block_names[block]
        else:
            label = (
                "+".join(layers[i].name for i in run)
                if len(run) <= 2
                else f"{layers[run[0]].name}..{layers[run[-1]].name}"
            )
        if block >= 0 and parts[block] > 1:
            seen[block] = seen.get(block, 0) + 1
            label = f"{label} (part {seen[block]} of {parts[block]})"
        chunks.append(Chunk(tuple(run), block, group_of_layer[run[0]], label))
    return tuple(chunks)


class PassHooks:
    """What a strategy does around each chunk. The defaults add no communication.

    ``precision`` (set by a strategy's hooks) adds autocast's weight casts to the chunks
    (:func:`autocast_extras`); ``tie_grad_bytes`` is the element size of tied parameters' partial
    gradients.
    """

    precision: Precision | None = None
    tie_grad_bytes: int = 4

    def extras(self, ctx: StepContext, chunk: Chunk, phase: str) -> tuple[float, float, list[MemoryChange]]:
        """(device seconds, host operator dispatches, memory changes at its end) the framework adds
        to ``chunk``'s ``phase`` (``fwd``, ``bwd`` or ``recompute``): autocast's weight casts."""
        return autocast_extras(ctx, chunk, phase, self.precision)

    def before_forward(self, builder: PlanBuilder, chunk: Chunk, previous_op: int | None) -> list[int]:
        """Operations the chunk's forward must wait for (e.g. all-gathers of its unit)."""
        return []

    def forward_started(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        """Called right after the forward operation is added (prefetch is issued from its start)."""

    def forward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        """Memory changes when the chunk's forward ends, besides its saved activations."""
        return []

    def before_backward(
        self, builder: PlanBuilder, layers: Sequence[int], previous_op: int | None
    ) -> list[int]:
        """Operations a backward (or recompute) of ``layers`` must wait for."""
        return []

    def backward_released(self, chunk: Chunk) -> list[MemoryChange]:
        """Memory freed just after the chunk's backward ends, once its gradients exist (FSDP frees a
        unit's gathered parameters in its post-backward hook, after autograd made the gradients)."""
        return []

    def backward_started(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        """Called right after the backward operation is added."""

    def backward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        """Memory changes when the chunk's backward ends (gradients), besides freed activations."""
        return []

    def backward_done(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        """Called after the backward operation is added: gradient communication hangs here."""


def autocast_extras(
    ctx: StepContext, chunk: Chunk, phase: str, precision: Precision | None
) -> tuple[float, float, list[MemoryChange]]:
    """Autocast's casts of ``chunk``'s weights (``torch.autocast`` with fp32 parameters).

    Forward (and a recompute) casts every weight it uses to the low dtype (read 4 B, write the low
    dtype: one ``_to_copy`` per parameter tensor) and autograd saves the cast for the backward's
    input gradient, so it is held (``buffers``) until the chunk's backward; backward casts each
    weight gradient back to fp32 (``ToCopyBackward``: read low, write 4 B).
    """
    if precision is None or not precision.autocast:
        return 0.0, 0.0, []
    params, tensors, _ = ctx.layer_counts(chunk.layers)
    if params == 0:
        return 0.0, 0.0, []
    low = DTYPE_BYTES[precision.low]
    seconds = ctx.copy_time_s(params * (4 + low) / 2.0)
    if phase == "bwd":
        return seconds, float(tensors), [("buffers", -float(params * low))]
    held: list[MemoryChange] = [("buffers", float(params * low))] if phase == "fwd" else []
    return seconds, float(tensors), held


def _activation_bytes(ctx: StepContext, layers: tuple[int, ...]) -> float:
    """Activation bytes ``layers`` save per sample (their sum, in layer order), once per context."""
    key = ("activation bytes", layers)
    known = ctx._memo.get(key)
    if known is None:
        model = ctx.workload.layers
        known = ctx._memo[key] = sum(model[i].activation_bytes for i in layers)
    return known


def _saved_bytes(ctx: StepContext, chunk: Chunk, checkpointed: bool) -> float:
    """Bytes a chunk keeps from forward to backward for one micro-batch."""
    layers = ctx.workload.layers
    mb = ctx.config.micro_batch
    if not checkpointed:
        return mb * _activation_bytes(ctx, chunk.layers)
    first = chunk.layers[0]
    if first > 0 and layers[first - 1].block == chunk.block:
        return 0.0  # inside a checkpointed block only the block's input is kept
    return mb * (layers[first - 1].output_bytes if first > 0 else layers[first].output_bytes)


def _loss_working(ctx: StepContext, chunk: Chunk) -> tuple[float, float]:
    """(forward, backward) ``temp`` bytes a chunk holding the loss adds while it runs, for one
    micro-batch: the cross entropy's working tensors over the rank's logits (read off the loss
    layer's streamed bytes)
    (:func:`simcore.compute.memory.cross_entropy_working_bytes`); (0, 0) for other chunks."""

    def compute() -> tuple[float, float]:
        layers, elem = ctx.workload.layers, ctx.workload.dtype_bytes
        forward = backward = 0.0
        for i in chunk.layers:
            if layers[i].kind == "loss":
                # the loss layer streams 12 + elem bytes per logit (read elem, write 4 for the
                # upcast; read 4, write 4 for the log-softmax: presets and imported models alike)
                logits = layers[i].memory_bytes / (12.0 + elem)
                f, b = cross_entropy_working_bytes(
                    logits, elem, ctx.workload.vocab_parallel > 1, ctx.config.cross_entropy
                )
                forward, backward = forward + f, backward + b
        mb = ctx.config.micro_batch
        return mb * forward, mb * backward

    return ctx.memo(("loss working bytes", chunk.layers), compute)


def _tie_temp(ctx: StepContext, chunks: Sequence[Chunk], grad_bytes: int) -> dict[int, tuple[float, float]]:
    """Per chunk index: (temp bytes added when its backward ends, temp bytes released just after),
    for the partial gradients of tied parameters (see the module docstring)."""
    changes: dict[int, tuple[float, float]] = {}
    for tie in ctx.workload.ties:
        size, uses, seen = tie.params * grad_bytes, set(tie.layers), 0
        for index in reversed(range(len(chunks))):
            for _ in range(sum(1 for i in chunks[index].layers if i in uses)):
                seen += 1
                if seen == 1:
                    add, release = size, 0.0  # the first partial is held
                elif seen < len(uses):
                    add, release = 2 * size, 2 * size  # partial + running sum, old ones freed
                else:
                    add, release = size, 2 * size  # last partial; the sum is the gradient
                before = changes.get(index, (0.0, 0.0))
                changes[index] = (before[0] + add, before[1] + release)
    return changes


def build_microbatch(
    ctx: StepContext,
    builder: PlanBuilder,
    chunks: Sequence[Chunk],
    hooks: PassHooks,
    micro_batch: int | None,
    previous_op: int | None,
    forward_chunks: Sequence[Chunk] | None = None,
) -> int | None:
    """Add the forward and backward of one micro-batch; returns the last compute operation.

    ``micro_batch``: its number in the operations' keys and labels (1-based; None in a step of
    one). ``forward_chunks`` may cut forward more coarsely than backward (DDP's buckets matter only
    in backward); by default both passes use ``chunks``.
    """
    last = _forward_pass(
        ctx,
        builder,
        forward_chunks if forward_chunks is not None else chunks,
        hooks,
        micro_batch,
        previous_op,
    )
    return _backward_pass(ctx, builder, chunks, hooks, micro_batch, last)


def _pass_labels(ctx: StepContext, chunks: Sequence[Chunk], verb: str) -> tuple[Label, ...]:
    """Each chunk's label in a pass (``forward of block3``), once per context and cut."""
    names = tuple(chunk.label for chunk in chunks)
    return ctx.memo(("pass labels", verb, names), lambda: tuple(Label(f"{verb} of {name}") for name in names))


def _forward_pass(
    ctx: StepContext,
    builder: PlanBuilder,
    chunks: Sequence[Chunk],
    hooks: PassHooks,
    micro_batch: int | None,
    last: int | None,
) -> int | None:
    checkpoint = ctx.config.activation_checkpointing
    labels = _pass_labels(ctx, chunks, "forward")
    for chunk, label in zip(chunks, labels, strict=True):
        waits = hooks.before_forward(builder, chunk, last)
        saved = _saved_bytes(ctx, chunk, checkpoint and chunk.block >= 0)
        kernel_s, host_ops, held = hooks.extras(ctx, chunk, "fwd")
        working = _loss_working(ctx, chunk)[0]
        last = builder.compute(
            label,
            ctx.span_time("fwd", chunk.layers, kernel_extra_s=kernel_s, host_extra_ops=host_ops),
            key=builder.key(micro_batch=micro_batch, block=chunk.block if chunk.block >= 0 else None),
            kind="fwd",
            after=waits,
            on_start=[("temp", working)] if working else (),
            on_end=[("activations", saved), *held, *hooks.forward_memory(chunk)]
            + ([("temp", -working)] if working else []),
        )
        hooks.forward_started(builder, chunk, last)
    return last


def _backward_pass(
    ctx: StepContext,
    builder: PlanBuilder,
    chunks: Sequence[Chunk],
    hooks: PassHooks,
    micro_batch: int | None,
    last: int | None,
) -> int | None:
    checkpoint = ctx.config.activation_checkpointing
    mb = ctx.config.micro_batch
    block_layers = ctx.memo(("block layers",), ctx.workload.block_layer_indices) if checkpoint else ()
    recomputed: set[int] = set()
    ties = _tie_temp(ctx, chunks, hooks.tie_grad_bytes)
    labels = _pass_labels(ctx, chunks, "backward")
    for index in reversed(range(len(chunks))):
        chunk = chunks[index]
        tie_add, tie_release = ties.get(index, (0.0, 0.0))
        ckpt = checkpoint and chunk.block >= 0
        freed = _saved_bytes(ctx, chunk, ckpt)
        if ckpt:
            freed += mb * _activation_bytes(ctx, chunk.layers)
            if chunk.block not in recomputed:
                recomputed.add(chunk.block)
                members = block_layers[chunk.block]
                waits = hooks.before_backward(builder, members, last)
                block = Chunk(tuple(members), chunk.block, chunk.group, chunk.label)
                kernel_s, host_ops, _ = hooks.extras(ctx, block, "recompute")
                last = builder.compute(
                    builder.label(f"recompute of {ctx.workload.block_names[chunk.block]}"),
                    ctx.span_time("recompute", members, kernel_extra_s=kernel_s, host_extra_ops=host_ops),
                    key=builder.key(micro_batch=micro_batch, block=chunk.block if chunk.block >= 0 else None),
                    kind="recompute",
                    after=waits,
                    on_start=[("activations", mb * _activation_bytes(ctx, tuple(members)))],
                )
        waits = hooks.before_backward(builder, chunk.layers, last)
        kernel_s, host_ops, released = hooks.extras(ctx, chunk, "bwd")
        working = _loss_working(ctx, chunk)[1]
        last = builder.compute(
            labels[index],
            ctx.span_time("bwd", chunk.layers, kernel_extra_s=kernel_s, host_extra_ops=host_ops),
            key=builder.key(micro_batch=micro_batch, block=chunk.block if chunk.block >= 0 else None),
            kind="bwd",
            after=waits,
            on_start=[("temp", working)] if working else (),
            on_end=[*hooks.backward_memory(chunk), ("activations", -freed), *released]
            + ([("temp", tie_add)] if tie_add else [])
            + ([("temp", -working)] if working else []),
            after_end=hooks.backward_released(chunk) + ([("temp", -tie_release)] if tie_release else []),
        )
        hooks.backward_started(builder, chunk, last)
        hooks.backward_done(builder, chunk, last)
    return last


def build_quiet_microbatches(
    ctx: StepContext,
    builder: PlanBuilder,
    count: int,
    on_end: Sequence[MemoryChange],
    precision: Precision | None = None,
    host_extra_ops: float = 0.0,
) -> int | None:
    """``count`` micro-batches with no communication (DDP no_sync, one GPU) as one operation.

    Their peak is never above the detailed micro-batch that follows (same activations, gradients
    at most the same), so one operation keeps the timeline's peak while saving events. Autocast's
    casts (``precision``) and ``host_extra_ops`` framework dispatches per micro-batch are included.
    """
    if count <= 0:
        return None
    whole = ctx.whole or ctx
    seconds = whole.memo(
        ("whole micro-batch", precision, host_extra_ops, whole.config.activation_checkpointing),
        lambda: _whole_microbatch_s(whole, precision, host_extra_ops),
    )
    name = "micro-batch 1 (no sync)" if count == 1 else f"micro-batches 1-{count} (no sync)"
    return builder.compute(name, count * seconds, kind="fwd+bwd", on_end=on_end)


def _whole_microbatch_s(ctx: StepContext, precision: Precision | None, host_extra_ops: float) -> float:
    """One micro-batch over the whole model as one operation (its kernels or its dispatch, the longer)."""
    whole = Chunk(tuple(range(len(ctx.workload.layers))), -1, 0, "model")
    phases = ("fwd", "bwd", "recompute") if ctx.config.activation_checkpointing else ("fwd", "bwd")
    seconds = 0.0
    for phase in phases:
        kernel_s, host_ops, _ = autocast_extras(ctx, whole, phase, precision)
        extra = host_extra_ops / 2.0 if phase != "recompute" else 0.0
        seconds += ctx.span_time(
            phase, whole.layers, kernel_extra_s=kernel_s, host_extra_ops=host_ops + extra
        )
    return seconds


def add_collective(
    ctx: StepContext,
    builder: PlanBuilder,
    op: str,
    size_bytes: float,
    group: Sequence[int],
    name: str | Label,
    *,
    key: OpKey = NO_KEY,
    after: Sequence[int] = (),
    after_start: Sequence[int] = (),
    on_start: Sequence[MemoryChange] = (),
    on_end: Sequence[MemoryChange] = (),
    extra_s: float = 0.0,
) -> int:
    """Add one collective to the communication stream, priced by the context's collective model.

    ``extra_s``: work the framework runs on the collective's stream around it (FSDP2's copy-in).
    A group of one rank moves nothing: the operation is kept (its memory effects still apply) with
    zero time and zero bytes. ``key``: the operation's :class:`~simcore.step.plan.OpKey`.
    """
    if len(group) <= 1 or size_bytes <= 0:
        return builder.comm(
            name,
            0.0,
            key=key,
            kind=op,
            size_bytes=0.0,
            after=after,
            after_start=after_start,
            on_start=on_start,
            on_end=on_end,
        )
    cost = ctx.collective(op, float(size_bytes), tuple(group))
    return builder.comm(
        name,
        cost.time_s + extra_s,
        key=key,
        kind=op,
        size_bytes=size_bytes,
        link=cost.bottleneck_link,
        link_kind=cost.link_kind,
        contention=ctx.contention(cost),
        after=after,
        after_start=after_start,
        on_start=on_start,
        on_end=on_end,
    )
