"""What a pipelined stage holds across its micro-batches besides their activations.

A stage's data-parallel run (:mod:`simcore.parallel.step`) prices one micro-batch; its memory
timeline holds one micro-batch's activations and whatever that one micro-batch's backward leaves
behind. Under a pipeline schedule the rank runs many micro-batches before the last backward, so
two more things are held at its peak:

- the activations of every micro-batch in flight (the schedule's order: between a chunk's ``F``
  and its ``B``), and
- the state that the first backward of a chunk creates and that later micro-batches accumulate
  into, held until the step's last backward: the gradients, and for FSDP the gathered parameters.

Per data-parallel strategy (``zero_stage``; ``framework``):

- DDP and ZeRO-1 (0, 1): the full gradients of the chunk in the gradient dtype (DDP's
  ``no_sync()`` micro-batches accumulate into ``.grad``; ZeRO-1 reduces once, after the last
  micro-batch).
- ZeRO-2 (2): the gradients are reduce-scattered every micro-batch; only the rank's shard stays.
- FSDP2 (3, ``torch-fsdp``) under ``torch.distributed.pipelining``: every micro-batch's backward
  runs with ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)``, and the
  reduce-scatters run after the last backward (``PipelineStage.backward_maybe_with_nosync``,
  ``torch/distributed/pipelining/stage.py``, torch 2.6: ``run_post_backward``). So the unsharded
  gradients accumulate over the step in the reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``
  upcasts them when ``MixedPrecisionPolicy.reduce_dtype`` differs, torchtitan's fp32), and the
  gathered parameters stay gathered after every backward; with ``reshard_after_forward=False``
  (torchtitan's setting under pipelining, ``parallelize_llama.apply_fsdp``) from the first forward
  on, else until the next forward reshards them.
- DeepSpeed ZeRO-3 (3, ``deepspeed``) reduces every micro-batch: the shard only, as ZeRO-2.

The pipeline runtime itself holds tensors across micro-batches too. ``torch.distributed.pipelining``
at torch 1963fc8 (2024-12-23, the commit torchtitan 9dec370's published runs use), per stage
(``torch/distributed/pipelining/stage.py``), which :class:`RuntimeHeld` counts:

- ``forward_one_chunk`` appends every micro-batch's stage output to ``self.output_chunks``,
  cleared only by ``clear_runtime_states`` at the next ``step()``: every stage keeps all its
  micro-batches' outputs until the step ends (pytorch/pytorch PR #153383, May 2025, restricted it
  to the last stage; issue #159251 on the last stage's logits). On the last stage the output is the
  logits (bf16, split over the vocabulary with torchtitan's loss parallel).
- ``_prepare_forward_infra`` makes one receive buffer per micro-batch (``args_recv_info[mb]``,
  ``_make_tensor_from_meta``) on every stage but the first, and ``_prepare_backward_infra`` one
  gradient receive buffer per micro-batch (``grad_recv_info[mb]``) on every stage but the last;
  both live as long as the stage. A forward buffer in flight is the stage's first block's saved
  input, counted with the activations; the others are held besides them.
- ``stage_backward`` runs ``torch.autograd.backward`` and reads the input gradient from the
  receive buffer's ``.grad`` (a leaf), which ``clear_runtime_states`` resets only at the next
  step: each backward leaves an input-sized gradient held until the step ends.
- ``step()`` returns ``_merge_outputs(output_chunks)`` on the last stage (``merge_chunks``:
  ``torch.cat`` of every micro-batch's output): once the passes end, a copy of all the logits
  exists beside them until the caller drops it (torchtitan's ``train.py`` does not keep it).

The peak is the largest sum over the rank's pass boundaries (the activations and the gradients
change together inside a pass, one freeing as the other is made, so a pass's extremes are its
ends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.fp8 import fp8_gather_bytes
from simcore.compute.memory import MemoryTimeline
from simcore.parallel.pp import PipelineOp

if TYPE_CHECKING:
    from simcore.parallel.stage import StageModel
    from simcore.strategies.base import StepContext, Strategy

__all__ = [
    "HeldState",
    "RuntimeHeld",
    "held_state",
    "pipeline_peak_bytes",
    "pipeline_peak_parts",
    "pipelined_extra_bytes",
    "run_state_bytes",
    "stage_held_state",
    "stage_runtime_held",
    "state_category",
    "torch_pipelining_held",
]


@dataclass(frozen=True, slots=True)
class HeldState:
    """Bytes a pipelined rank holds across micro-batches besides activations."""

    grads: tuple[float, ...]  # per chunk: made by its first backward, kept until the last one ends
    params_always: float = 0.0  # gathered parameters held from the first forward to the last backward
    params_after_backward: float = 0.0  # gathered parameters held from a backward to the next forward


@dataclass(frozen=True, slots=True)
class RuntimeHeld:
    """Bytes the pipeline runtime holds across micro-batches, per chunk (see the module docstring):
    ``outputs``: each forward's stage output, held until the step ends; ``input_grads``: each
    backward's input gradient, held until the step ends; ``recv_inputs``: one forward receive
    buffer per micro-batch, always (the in-flight ones are activations already); ``recv_grads``:
    one gradient receive buffer per micro-batch, always; ``merged``: per micro-batch, what the
    last stage's merge of its outputs copies once the passes end (0 on other ranks)."""

    outputs: tuple[float, ...]
    input_grads: tuple[float, ...]
    recv_inputs: tuple[float, ...]
    recv_grads: tuple[float, ...]
    merged: float = 0.0

    def at(self, forwards: Sequence[int], backwards: Sequence[int], micro: int) -> float:
        """What is held after ``forwards[c]`` forwards and ``backwards[c]`` backwards of each chunk
        ``c`` of ``micro`` micro-batches."""
        total = 0.0
        for c, (f, b) in enumerate(zip(forwards, backwards, strict=True)):
            idle = micro - (f - b)  # receive buffers whose micro-batch is not in flight
            total += f * self.outputs[c] + b * self.input_grads[c]
            total += idle * self.recv_inputs[c] + micro * self.recv_grads[c]
        return total

    def after_step(self, micro: int) -> float:
        """What is held once every chunk has run its ``micro`` forwards and backwards: kept through
        the optimizer step, until the next step's ``clear_runtime_states``."""
        done = [micro] * len(self.outputs)
        return self.at(done, done, micro)

    def merge_bytes(self, micro: int) -> float:
        """The last stage's concatenated outputs of ``micro`` micro-batches, made as the passes end."""
        return micro * self.merged


def torch_pipelining_held(
    chunk_stages: Sequence[int], stages: int, *, hidden_bytes: Sequence[float], last_output_bytes: float
) -> RuntimeHeld:
    """:class:`RuntimeHeld` of a rank of ``torch.distributed.pipelining`` (torch 2.6) whose chunks
    are the virtual stages ``chunk_stages`` of ``stages``: ``hidden_bytes[c]``, the activation one
    micro-batch passes between stages at chunk ``c``; ``last_output_bytes``, one micro-batch's
    output of the last stage (the logits)."""
    outputs, grads, recv_in, recv_grad = [], [], [], []
    merged = last_output_bytes if stages - 1 in chunk_stages else 0.0
    for c, stage in enumerate(chunk_stages):
        first, last = stage == 0, stage == stages - 1
        outputs.append(last_output_bytes if last else hidden_bytes[c])
        grads.append(0.0 if first else hidden_bytes[c])
        recv_in.append(0.0 if first else hidden_bytes[c])
        recv_grad.append(0.0 if last else hidden_bytes[c])
    return RuntimeHeld(tuple(outputs), tuple(grads), tuple(recv_in), tuple(recv_grad), merged)


def held_state(
    zero_stage: int,
    framework: str,
    *,
    chunk_params: Sequence[float],
    grad_bytes: float,
    reduce_bytes: float,
    shards: int,
    gathered_bytes: float = 0.0,
    reshard_after_forward: bool = True,
) -> HeldState:
    """The :class:`HeldState` of a strategy's rank (see the module docstring).

    ``chunk_params``: the rank's parameters per chunk (after tensor/expert sharding, before the
    data-parallel shard); ``grad_bytes`` / ``reduce_bytes``: bytes per gradient element as backward
    makes it and as it is reduced; ``shards``: the data-parallel shard group; ``gathered_bytes``:
    the rank's parameters as FSDP gathers them (fp8 linears in fp8 where the recipe gathers so).
    """
    if zero_stage == 3 and framework == "torch-fsdp":
        grads = tuple(p * reduce_bytes for p in chunk_params)
        if reshard_after_forward:
            return HeldState(grads, 0.0, gathered_bytes)
        return HeldState(grads, gathered_bytes, 0.0)
    if zero_stage >= 2:
        return HeldState(tuple(p / max(1, shards) * grad_bytes for p in chunk_params))
    return HeldState(tuple(p * grad_bytes for p in chunk_params))


def pipeline_peak_parts(
    order: Sequence[PipelineOp],
    activations: Sequence[float],
    held: HeldState,
    runtime: RuntimeHeld | None = None,
) -> tuple[float, float]:
    """(activations, held state) at the boundary of the rank's passes ``order`` where their sum is
    largest: the activations in flight (``activations[chunk]`` per micro-batch, from its ``F`` to
    its ``B``) with what the pipeline ``runtime`` holds then (counted with the activations), and
    ``held``'s gradients and gathered parameters then."""
    in_flight = grads = 0.0
    best = (0.0, 0.0)
    done: set[int] = set()
    chunks = len(activations)
    forwards, backwards = [0] * chunks, [0] * chunks
    micro = sum(1 for op in order if op.kind == "F" and op.chunk == 0)
    for op in order:
        if op.kind == "F":
            in_flight += activations[op.chunk]
            forwards[op.chunk] += 1
            after_backward = 0.0
        elif op.kind == "B":
            in_flight -= activations[op.chunk]
            backwards[op.chunk] += 1
            if op.chunk not in done:
                done.add(op.chunk)
                grads += held.grads[op.chunk]
            after_backward = held.params_after_backward
        else:
            continue
        state = grads + held.params_always + after_backward
        kept = in_flight + (runtime.at(forwards, backwards, micro) if runtime is not None else 0.0)
        if kept + state > sum(best):
            best = (kept, state)
    return best


def pipeline_peak_bytes(
    order: Sequence[PipelineOp],
    activations: Sequence[float],
    held: HeldState,
    runtime: RuntimeHeld | None = None,
) -> float:
    """The most a rank holds at a boundary of its passes (:func:`pipeline_peak_parts` summed)."""
    return sum(pipeline_peak_parts(order, activations, held, runtime))


def run_state_bytes(
    timeline: MemoryTimeline,
    initial: Mapping[str, float],
    last_backward_s: float,
    zero_stage: int,
    framework: str,
) -> float:
    """What the one-micro-batch run counts at its peak of the state :func:`held_state` describes:
    the gradients made during its step (and, for FSDP2, its gathered units and unsharded
    gradients, its ``buffers``). A peak after the run's last backward (``last_backward_s``: the
    optimizer step) says nothing of what its passes held: none is counted then."""
    if not timeline.samples:
        return 0.0
    raw = max(total for _, total, _ in timeline.samples)
    when = next(t for t, total, _ in timeline.samples if total == raw)
    if when > last_backward_s * (1 + 1e-12):
        return 0.0
    breakdown = timeline.peak().breakdown
    grads = max(0.0, breakdown.get("grads", 0.0) - initial.get("grads", 0.0))
    if zero_stage == 3 and framework == "torch-fsdp":
        return grads + max(0.0, breakdown.get("buffers", 0.0) - initial.get("buffers", 0.0))
    return grads


def pipelined_extra_bytes(
    order: Sequence[PipelineOp],
    activations: Sequence[float],
    held: HeldState,
    *,
    run_activations: float,
    run_state: float,
    runtime: RuntimeHeld | None = None,
) -> tuple[float, float]:
    """(activations, held state) a pipelined rank holds at its peak beyond its one-micro-batch
    run's: the schedule's peak less what the run counted of each (``run_activations``: one
    micro-batch of every chunk; ``run_state``: :func:`run_state_bytes`), neither below zero."""
    in_flight, state = pipeline_peak_parts(order, activations, held, runtime)
    return max(0.0, in_flight - run_activations), max(0.0, state - run_state)


def state_category(zero_stage: int, framework: str) -> str:
    """The memory category the held state is counted in: FSDP2's unsharded gradients and gathered
    parameters are ``buffers`` (as its run counts them), everyone else's ``grads``."""
    return "buffers" if zero_stage == 3 and framework == "torch-fsdp" else "grads"


def stage_held_state(model: StageModel, ctx: StepContext, strategy: Strategy) -> HeldState:
    """:func:`held_state` of a stage's rank: its chunks' parameters, its strategy's dtypes, its
    data-parallel group and (FSDP) its parameters' gathered bytes."""
    precision = ctx.precision(strategy)
    layers = model.workload.layers
    chunk_params = [float(ctx.layer_counts(list(chunk))[0]) for chunk in model.chunk_slices]
    gather, fp8 = precision.bytes("gather"), ctx.config.fp8
    everything = range(len(layers))
    gathered = (
        fp8_gather_bytes(layers, everything, gather, fp8) if fp8 != "none" else sum(chunk_params) * gather
    )
    sharded = strategy.zero_stage == 3 and strategy.framework == "torch-fsdp"
    return held_state(
        strategy.zero_stage,
        strategy.framework,
        chunk_params=chunk_params,
        grad_bytes=precision.bytes("unsharded_grad" if sharded else "grad"),
        reduce_bytes=precision.bytes("reduce"),
        shards=ctx.gpus,
        gathered_bytes=gathered,
        reshard_after_forward=ctx.config.reshard_after_forward,
    )


def stage_runtime_held(model: StageModel, pp: int, vpp: int, micro_batch: int) -> RuntimeHeld:
    """:func:`torch_pipelining_held` of a stage's rank, for micro-batches of ``micro_batch``
    samples: chunk ``c`` of rank ``r`` is virtual stage ``c * pp + r``; the activation passed between
    stages is a block's output (its last block layer's ``output_bytes``, sharded as the stage runs
    it: sequence-parallel ranks pass their slice), the last stage's output the output head's
    logits (``lm_head``'s ``output_bytes``, split over the vocabulary)."""
    layers = model.workload.layers
    hidden = []
    head = 0.0
    for chunk in model.chunk_slices:
        blocks = [layers[i] for i in chunk if layers[i].block >= 0]
        hidden.append(blocks[-1].output_bytes * micro_batch if blocks else 0.0)
        head = max(
            [head] + [layers[i].output_bytes * micro_batch for i in chunk if layers[i].name == "lm_head"]
        )
    stages = [c * pp + model.rank for c in range(len(model.chunk_slices))]
    return torch_pipelining_held(stages, pp * vpp, hidden_bytes=hidden, last_output_bytes=head)
