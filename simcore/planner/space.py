"""What the planner searches: layouts (strategy x micro-batch x recompute, and the model-parallel
degrees once the step model has them), GPU counts, and the floor a layout's memory cannot go below.

A :class:`Layout` is one way to run a training step on a given number of GPUs. The data-parallel
axes are searched today; ``tp``, ``pp``, ``cp``, ``ep`` and ``offload`` are carried (always 1 and
off) so records keep one shape when tensor, pipeline, context and expert parallelism reach the
step model: :func:`layouts_for` is where those axes plug in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from simcore.compute.memory import model_state_bytes
from simcore.errors import TrainsimError
from simcore.strategies import strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.workload.types import Workload

__all__ = [
    "DEFAULT_GLOBAL_BATCH",
    "DEFAULT_MAX_MICRO_BATCH",
    "DEFAULT_TOKENS_PER_STEP",
    "MAX_GPUS",
    "Layout",
    "SearchSpace",
    "layouts_for",
    "memory_floor_bytes",
    "parse_gpu_counts",
    "resolve_global_batch",
]

# Language models: 4M tokens per optimizer step, Llama 2's global batch (Touvron et al., "Llama 2:
# Open Foundation and Fine-Tuned Chat Models", 2023, section 2.2: "a global batch-size of 4M tokens").
DEFAULT_TOKENS_PER_STEP = 4 * 2**20
# Vision models: 1024 images per step (our default: the ResNet-50 batch at which Goyal et al., "Accurate,
# Large Minibatch SGD", 2017, report no loss of accuracy with the linear scaling rule).
DEFAULT_GLOBAL_BATCH = 1024
DEFAULT_MAX_MICRO_BATCH = 32
MAX_GPUS = 1 << 20
# ZeRO stage per strategy and whether its shard group is one node (HSDP) or every rank.
_STAGES = {"ddp": (0, False), "zero1": (1, False), "zero2": (2, False), "zero3": (3, False),
           "fsdp": (3, False), "hsdp": (3, True)}  # fmt: skip
_RANGE = re.compile(r"^(\d+)\s*(?:\.\.|:)\s*(\d+)(?:\s*:\s*(x?)(\d+))?$")


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to run the step: the strategy, micro-batch, recompute and model-parallel degrees."""

    strategy: str
    micro_batch: int
    recompute: bool = False
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    offload: bool = False

    def label(self) -> str:
        parts = [self.strategy, f"mb={self.micro_batch}"]
        parts += [
            f"{name}={getattr(self, name)}" for name in ("tp", "pp", "cp", "ep") if getattr(self, name) > 1
        ]
        if self.recompute:
            parts.append("+recompute")
        if self.offload:
            parts.append("+offload")
        return " ".join(parts)

    def to_record(self) -> dict[str, object]:
        return {
            "strategy": self.strategy,
            "micro_batch": self.micro_batch,
            "recompute": self.recompute,
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "offload": self.offload,
        }


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The axes searched at every GPU count.

    ``micro_batches`` None: every divisor of the per-GPU batch up to ``max_micro_batch``.
    ``recompute``: the activation-checkpointing settings tried. ``max_tp`` bounds tensor
    parallelism (only 1 exists in today's step model).
    """

    strategies: tuple[str, ...] = tuple(strategy_names())
    micro_batches: tuple[int, ...] | None = None
    max_micro_batch: int = DEFAULT_MAX_MICRO_BATCH
    recompute: tuple[bool, ...] = (False, True)
    max_tp: int = 1

    def __post_init__(self) -> None:
        known = strategy_names()
        for name in self.strategies:
            if name not in known:
                raise TrainsimError(
                    f"the planner searches synchronous strategies only; {name!r} is not one of {', '.join(known)}"
                )
        if not self.strategies:
            raise TrainsimError("the search space has no strategy; give at least one of " + ", ".join(known))
        if self.micro_batches is not None and (not self.micro_batches or min(self.micro_batches) < 1):
            raise TrainsimError(f"micro-batch sizes must be positive, got {list(self.micro_batches or ())}")
        if self.max_micro_batch < 1 or self.max_tp < 1:
            raise TrainsimError("--max-micro-batch and --max-tp must be at least 1")
        if not self.recompute:
            raise TrainsimError("the search space needs at least one recompute setting (on or off)")


def parse_gpu_counts(text: str) -> tuple[int, ...]:
    """GPU counts from ``"64,128,256"``, ``"64..1024"`` (doubling), ``"64:1024:x2"`` (times 2) or
    ``"64:1024:64"`` (steps of 64); parts may be mixed (``"8,16,64..256"``). Sorted, no repeats."""
    counts: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.isdigit():
            counts.add(int(part))
            continue
        match = _RANGE.match(part)
        if not match:
            raise TrainsimError(
                f"--gpus: {part!r} is not understood; use counts (64,128), a doubling range (64..1024), "
                "a geometric range (64:1024:x2) or a stepped one (64:1024:64)"
            )
        start, stop = int(match[1]), int(match[2])
        times = match[3] == "x" or (match[4] is None)
        step = int(match[4]) if match[4] is not None else 2
        if start < 1 or stop < start or (times and step < 2) or step < 1:
            raise TrainsimError(
                f"--gpus: range {part!r} needs 1 <= start <= stop and a step >= 1 (a factor >= 2)"
            )
        value = start
        while value <= stop:
            counts.add(value)
            value = value * step if times else value + step
    if not counts:
        raise TrainsimError(f"--gpus: no GPU count in {text!r}")
    if min(counts) < 1 or max(counts) > MAX_GPUS:
        raise TrainsimError(f"--gpus: counts must be between 1 and {MAX_GPUS}, got {text!r}")
    return tuple(sorted(counts))


def resolve_global_batch(
    workload: Workload, *, global_batch: int | None, tokens_per_step: int | None, seq_len: int | None
) -> int:
    """Samples per step from ``--global-batch`` or ``--tokens-per-step`` (both must agree), or the
    default (:data:`DEFAULT_TOKENS_PER_STEP` for language models, :data:`DEFAULT_GLOBAL_BATCH` else)."""
    tokens = workload.tokens_per_sample
    if global_batch is not None and global_batch < 1:
        raise TrainsimError(f"--global-batch must be a positive number of samples, got {global_batch}")
    if tokens_per_step is not None:
        if tokens_per_step < 1:
            raise TrainsimError(f"--tokens-per-step must be positive, got {tokens_per_step}")
        if not tokens:
            raise TrainsimError(f"--tokens-per-step needs a language model; {workload.name} has no sequence")
        if tokens_per_step % tokens:
            raise TrainsimError(
                f"--tokens-per-step {tokens_per_step} is not a whole number of sequences of {tokens} tokens"
            )
        if global_batch is not None and global_batch * tokens != tokens_per_step:
            raise TrainsimError(
                f"--global-batch {global_batch} x --seq-len {seq_len or tokens} = {global_batch * tokens} tokens "
                f"contradicts --tokens-per-step {tokens_per_step}; give one of them"
            )
        return tokens_per_step // tokens
    if global_batch is not None:
        return global_batch
    if tokens:
        return max(1, DEFAULT_TOKENS_PER_STEP // tokens)
    return DEFAULT_GLOBAL_BATCH


def layouts_for(space: SearchSpace, gpus: int, global_batch: int, node_size: int) -> tuple[list[Layout], str]:
    """Every layout of ``space`` on ``gpus`` GPUs, or none and the reason.

    The global batch must split into whole micro-batches per GPU; HSDP needs whole nodes. This is
    where tensor, pipeline, context and expert parallelism plug in (their degrees divide ``gpus``,
    and the data-parallel degree is what remains).
    """
    if global_batch % gpus:
        return [], f"the global batch of {global_batch} does not split evenly over {gpus} GPUs"
    per_gpu = global_batch // gpus
    sizes = space.micro_batches or tuple(
        m for m in range(1, min(per_gpu, space.max_micro_batch) + 1) if per_gpu % m == 0
    )
    sizes = tuple(m for m in sizes if per_gpu % m == 0)
    if not sizes:
        return [], f"no micro-batch size divides the {per_gpu} samples per GPU"
    strategies = [s for s in space.strategies if s != "hsdp" or gpus % node_size == 0]
    if not strategies:
        return [], f"hsdp needs whole nodes of {node_size} GPUs"
    return [
        Layout(strategy, micro_batch, recompute)
        for strategy in strategies
        for micro_batch in sizes
        for recompute in space.recompute
    ], ""


def memory_floor_bytes(
    workload: Workload, config: TrainingConfig, layout: Layout, gpus: int, node_size: int
) -> float:
    """Bytes per GPU the step cannot go below, so layouts above the device's memory are skipped untimed.

    Two moments every strategy's step passes through: the optimizer step, with the parameters,
    gradients and optimizer state the strategy keeps (ZeRO paper, section 5.1:
    :func:`simcore.compute.memory.model_state_bytes`) all live; and the end of a micro-batch's
    forward, with its saved activations on top of parameters and optimizer state (without
    recompute). Both plus the allocator's overhead.
    """
    stage, per_node = _STAGES[layout.strategy]
    shards = min(node_size, gpus) if per_node else gpus
    states = model_state_bytes(
        stage, workload.params, shards, config.param_bytes, config.grad_bytes, config.optimizer_bytes
    )
    at_optimizer = math.fsum(states.values())
    activations = 0.0 if layout.recompute else layout.micro_batch * workload.activation_bytes_per_sample
    at_forward = states["params"] + states["optimizer"] + activations
    return max(at_optimizer, at_forward) + (config.allocator_overhead_bytes or 0.0)


def describe_axes(space: SearchSpace) -> str:
    """The searched axes, in words."""
    axes: Sequence[str] = ["strategy", "micro-batch"]
    if len(space.recompute) > 1:
        axes = [*axes, "recompute"]
    return " x ".join(axes)
