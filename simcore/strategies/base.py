"""What a training step is made of: the run's configuration and the context a strategy plans in.

A strategy (DDP, FSDP, ZeRO-1/2/3, HSDP, later the parameter-server modes) is a *plan builder*:
given a :class:`StepContext` (workload, configuration, GPU count, per-layer compute times and a
collective-cost function) it returns a :class:`~simcore.strategies.schedule.StepPlan`, the ordered
operations of one representative rank's compute and communication streams plus the memory each
operation allocates or frees. :mod:`simcore.strategies.schedule` runs that plan in SimPy.

Bytes per parameter follow the ZeRO paper (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020, section 3.1): mixed-precision Adam holds 2 bytes of
fp16/bf16 parameters, 2 bytes of fp16/bf16 gradients and K = 12 bytes of optimizer state (fp32
master weights, momentum and variance): 16 bytes per parameter. Without fp32 master weights (pure
bf16 training, as in the Mistral-7B example of the article "Understanding Distributed Training
Strategies and Hardware Effects") Adam's state is 8 bytes per parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.strategies.schedule import StepPlan
    from simcore.workload.types import Layer, Workload

__all__ = [
    "COMPUTE_DTYPES",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "DEFAULT_COMM_COMPUTE_SLOWDOWN",
    "OPTIMIZERS",
    "CommCost",
    "ConcurrentFn",
    "StepContext",
    "Strategy",
    "TrainingConfig",
    "model_flops_per_step",
]

MiB = 1024**2
GiB = 1024**3

# Bytes of one element per dtype a step can compute in (from the one dtype table). tf32 is a
# matmul mode of fp32 tensors, not a storage dtype, and fp8 training needs scaling recipes the
# strategies do not model.
COMPUTE_DTYPES = {name: DTYPE_BYTES[name] for name in ("fp32", "bf16", "fp16")}
# torch DDP's bucket sizes: bucket_cap_mb=25 and the first bucket's dist._DEFAULT_FIRST_BUCKET_BYTES
# (1 MiB; torch/nn/parallel/distributed.py). The only place trainsim states them.
DDP_BUCKET_BYTES = 25 * MiB
DDP_FIRST_BUCKET_BYTES = 1 * MiB
# fp32 optimizer state bytes per parameter, master weights excluded (ZeRO paper, section 3.1).
OPTIMIZERS = {"sgd": 0, "sgd-momentum": 4, "adam": 8, "adamw": 8}
# While a collective kernel runs, concurrent compute is this much slower. Our estimate, not a
# measurement: NCCL ring/tree kernels occupy one SM per channel and typically 8-16 channels run on
# an A100 (108 SMs), i.e. 7-15 % of the SMs, plus HBM traffic of the copies. A calibration profile's
# comm_compute_slowdown replaces it.
DEFAULT_COMM_COMPUTE_SLOWDOWN = 1.10
# CUDA context, cuBLAS/cuDNN workspaces, NCCL channel buffers and caching-allocator fragmentation
# per GPU. Our estimate: the CUDA context alone is 0.3-0.6 GB on recent drivers (nvidia-smi on an
# idle process that touched the GPU); workspaces and fragmentation take a few hundred MB more.
DEFAULT_ALLOCATOR_OVERHEAD_BYTES = 1 * GiB


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """How one training step is run, independent of the strategy's sharding.

    ``global_batch`` samples per step over all GPUs; each GPU runs micro-batches of ``micro_batch``
    samples and accumulates gradients over :meth:`accumulation_steps` of them. ``dtype`` is the
    compute dtype; with ``bf16``/``fp16`` and ``master_weights`` the optimizer keeps fp32 master
    weights (mixed precision). ``wrap`` is the FSDP wrapping policy: ``"per-block"``,
    ``"every-N-layers"``, ``"every-N-blocks"`` or a tuple of layer indices where units begin.
    ``steps`` > 1 with ``compute_jitter_sigma`` > 0 draws a lognormal compute slowdown per step
    from the simulation's seeded RNG (the slowest of the ranks gates a synchronous step).
    """

    global_batch: int = 32
    micro_batch: int = 1
    seq_len: int | None = None
    dtype: str = "bf16"
    optimizer: str = "adamw"
    master_weights: bool = True
    bucket_size_bytes: int = DDP_BUCKET_BYTES
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES
    gradient_as_bucket_view: bool = False  # torch DDP default: buckets are a copy of the gradients
    prefetch: int = 1
    reshard_after_forward: bool = True
    wrap: str | tuple[int, ...] = "per-block"
    zero3_prefetch_bucket_params: int = 50_000_000  # DeepSpeed stage3_prefetch_bucket_size default
    activation_checkpointing: bool = False
    comm_compute_slowdown: float | None = None
    allocator_overhead_bytes: int = DEFAULT_ALLOCATOR_OVERHEAD_BYTES
    steps: int = 1
    compute_jitter_sigma: float = 0.0
    # torch.optim implementation ("auto": foreach on GPUs, single-tensor on CPUs, as torch picks);
    # it sets the optimizer step's scratch memory (simcore.compute.memory.optimizer_step_temp_bytes).
    optimizer_impl: str = "auto"

    def __post_init__(self) -> None:
        for name in ("global_batch", "micro_batch", "steps", "bucket_size_bytes", "first_bucket_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainsimError(f"training config: {name} must be a positive integer, got {value!r}")
        if self.seq_len is not None and self.seq_len < 1:
            raise TrainsimError(f"training config: seq_len must be a positive integer, got {self.seq_len!r}")
        if self.dtype not in COMPUTE_DTYPES:
            raise TrainsimError(
                f"training config: dtype {self.dtype!r} is not allowed; allowed: {', '.join(COMPUTE_DTYPES)}"
            )
        if self.optimizer not in OPTIMIZERS:
            raise TrainsimError(
                f"training config: optimizer {self.optimizer!r} is not known; "
                f"allowed: {', '.join(OPTIMIZERS)}"
            )
        if self.prefetch < 0:
            raise TrainsimError(f"training config: prefetch must be 0 or more units, got {self.prefetch}")
        if self.comm_compute_slowdown is not None and not self.comm_compute_slowdown >= 1.0:
            raise TrainsimError(
                f"training config: comm_compute_slowdown must be >= 1, got {self.comm_compute_slowdown}"
            )
        if self.allocator_overhead_bytes < 0 or self.compute_jitter_sigma < 0:
            raise TrainsimError(
                "training config: allocator_overhead_bytes and compute_jitter_sigma must be >= 0"
            )
        if self.zero3_prefetch_bucket_params < 1:
            raise TrainsimError("training config: zero3_prefetch_bucket_params must be >= 1")
        from simcore.compute.memory import OPTIMIZER_IMPLS

        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise TrainsimError(
                f"training config: optimizer_impl {self.optimizer_impl!r} is not known; "
                f"allowed: {', '.join(OPTIMIZER_IMPLS)}"
            )

    def accumulation_steps(self, gpus: int) -> int:
        """Micro-batches per GPU per step: global_batch / (gpus * micro_batch), which must divide."""
        per_step = gpus * self.micro_batch
        if gpus < 1 or self.global_batch % per_step:
            raise TrainsimError(
                f"global batch {self.global_batch} is not divisible by gpus x micro-batch = "
                f"{gpus} x {self.micro_batch} = {per_step}; choose a global batch that is a "
                f"multiple of {per_step}"
            )
        return self.global_batch // per_step

    @property
    def mixed_precision(self) -> bool:
        return self.dtype != "fp32"

    @property
    def param_bytes(self) -> int:
        """Bytes per parameter of the working (compute-dtype) copy."""
        return COMPUTE_DTYPES[self.dtype]

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (gradients are produced and reduced in the compute dtype)."""
        return COMPUTE_DTYPES[self.dtype]

    @property
    def optimizer_bytes(self) -> int:
        """Optimizer-state bytes per parameter: fp32 master weights (mixed precision) plus states."""
        master = 4 if self.mixed_precision and self.master_weights else 0
        return master + OPTIMIZERS[self.optimizer]

    def slowdown(self, calibrated: float | None) -> float:
        """The comm/compute slowdown in force: this config's, else the calibration's, else the default."""
        if self.comm_compute_slowdown is not None:
            return self.comm_compute_slowdown
        return calibrated if calibrated is not None else DEFAULT_COMM_COMPUTE_SLOWDOWN


@dataclass(frozen=True, slots=True)
class CommCost:
    """The uncontended time of one collective and the link that limits it."""

    time_s: float
    bottleneck_link: str = ""
    link_kind: str = ""


CollectiveFn = Callable[[str, float, tuple[int, ...]], CommCost]
# prices one collective run by several same-shape groups at once (each group's time)
ConcurrentFn = Callable[[str, float, tuple[tuple[int, ...], ...]], CommCost]


class LayerTimer(Protocol):
    """What a strategy needs from :class:`simcore.compute.roofline.ComputeModel`."""

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float: ...

    def optimizer_time_s(self, params: int, optimizer: str) -> float: ...


@dataclass(slots=True)
class StepContext:
    """Everything a strategy plans with, for one (cluster, gpus) point.

    ``rank_groups`` describes placement for the representative rank 0: ``world`` (all ranks),
    ``node`` (ranks on rank 0's host) and ``cross_node`` (the rank with rank 0's local index on
    every host). ``collective(op, size_bytes, group)`` prices one collective.
    """

    workload: Workload
    config: TrainingConfig
    gpus: int
    timer: LayerTimer
    collective: CollectiveFn
    world: tuple[int, ...]
    node: tuple[int, ...]
    cross_node: tuple[int, ...]
    device_memory_bytes: int
    _layer_times: dict[str, list[float]] = field(default_factory=dict)
    concurrent: ConcurrentFn | None = None  # same-shape groups priced together (None: one at a time)

    @property
    def accumulation(self) -> int:
        return self.config.accumulation_steps(self.gpus)

    def layer_times(self, phase: str) -> list[float]:
        """Seconds per layer for one micro-batch in ``phase`` ("fwd", "bwd", "recompute"), cached."""
        times = self._layer_times.get(phase)
        if times is None:
            mb = self.config.micro_batch
            vectorised = getattr(self.timer, "layer_times_s", None)
            if vectorised is not None:
                times = [float(t) for t in vectorised(self.workload, mb, phase)]
            else:
                times = [self.timer.layer_time_s(layer, mb, phase) for layer in self.workload.layers]
            self._layer_times[phase] = times
        return times

    def span_time(self, phase: str, layers: Sequence[int]) -> float:
        times = self.layer_times(phase)
        return math.fsum(times[i] for i in layers)

    def copy_time_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` in device memory (read + write) at the timer's memory bandwidth.

        ``memory_bandwidth_Bps`` counts bytes read plus written, as the calibration's copy probe
        does; a timer without one (a test double) copies for free.
        """
        bandwidth = getattr(self.timer, "memory_bandwidth_Bps", None)
        if not bandwidth or nbytes <= 0:
            return 0.0
        return 2.0 * float(nbytes) / float(bandwidth)

    def optimizer_step_s(self, params: int) -> float:
        """One optimizer update of ``params`` parameters (this rank's shard), with the host's
        per-tensor dispatch where the timer models it (it iterates over every parameter tensor,
        sharded or not)."""
        seconds = self.timer.optimizer_time_s(params, self.config.optimizer)
        dispatch = getattr(self.timer, "optimizer_dispatch_s", None)
        if dispatch is not None:
            from simcore.compute.roofline import param_tensor_count

            seconds += float(dispatch(param_tensor_count(self.workload), self.config.optimizer))
        return seconds

    def microbatch_compute_s(self) -> float:
        """Forward + backward (+ recompute with activation checkpointing) of one micro-batch."""
        total = math.fsum(self.layer_times("fwd")) + math.fsum(self.layer_times("bwd"))
        if self.config.activation_checkpointing:
            total += math.fsum(self.layer_times("recompute"))
        return total


class Strategy(Protocol):
    """A data-parallel strategy: a name and a plan builder."""

    name: str
    description: str

    def build_plan(self, ctx: StepContext) -> StepPlan: ...


def model_flops_per_step(workload: Workload, global_batch: int) -> float:
    """Model FLOPs of one step, recomputation excluded (the MFU numerator).

    Language models (tokens_per_sample > 0): 6 * N * tokens (Kaplan et al. 2020; PaLM's MFU,
    Chowdhery et al. 2022, appendix B, without the attention term). Others: forward + backward
    FLOPs of the workload per sample times the samples.
    """
    if workload.tokens_per_sample > 0:
        return 6.0 * workload.params * workload.tokens_per_sample * global_batch
    return (workload.fwd_flops_per_sample + workload.bwd_flops_per_sample) * global_batch
