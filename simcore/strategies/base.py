"""What a training step is made of: the run's configuration and the context a strategy plans in.

A strategy (DDP, FSDP, ZeRO-1/2/3, HSDP, later the parameter-server modes) is a *plan builder*:
given a :class:`StepContext` (workload, configuration, GPU count, per-layer compute times and a
collective-cost function) it returns a :class:`~simcore.step.plan.StepPlan`, the ordered
operations of one representative rank's compute and communication streams plus the memory each
operation allocates or frees. :mod:`simcore.step.plan` runs that plan in SimPy.

Bytes per parameter follow the ZeRO paper (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020, section 3.1): mixed-precision Adam holds 2 bytes of
fp16/bf16 parameters, 2 bytes of fp16/bf16 gradients and K = 12 bytes of optimizer state (fp32
master weights, momentum and variance): 16 bytes per parameter. Without fp32 master weights (pure
bf16 training, as in the Mistral-7B example of the article "Understanding Distributed Training
Strategies and Hardware Effects") Adam's state is 8 bytes per parameter.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from simcore.collectives.tuning import channels as nccl_channels
from simcore.compute.fp8 import FP8_RECIPES
from simcore.compute.host_syncs import host_sync_time_s, syncs_per_step
from simcore.compute.memory import CROSS_ENTROPY_KERNELS, optimizer_step_temp_bytes, runtime_memory
from simcore.compute.optimizer import (
    IMPL_ALIASES,
    OPTIMIZER_IMPLS,
    master_cast_bytes,
    optimizer_names,
    optimizer_spec,
    optimizer_step_cost,
    resolve_optimizer_impl,
)
from simcore.compute.overheads import framework_overheads
from simcore.compute.precision import (
    PARAMETER_SERVER_FRAMEWORK,
    PRECISION_MODES,
    Precision,
    resolve_precision,
)
from simcore.compute.roofline import kernel_class, param_tensor_count
from simcore.compute.sm_sharing import (
    free_sm_slowdown,
    overlap_slowdown,
    persistent_gemm_waves_of,
    runs_persistent_gemms,
)
from simcore.data import data_file
from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.step.caches import StepCaches
from simcore.step.cost import CollectiveFn, CommCost, ConcurrentFn, priced_between_powers_of_two

if TYPE_CHECKING:
    from simcore.step.plan import StepPlan
    from simcore.workload.types import Layer, Workload

__all__ = [
    "COMPUTE_DTYPES",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "DEFAULT_COMM_COMPUTE_SLOWDOWN",
    "OPTIMIZERS",
    "SHARD_SCOPES",
    "CommCost",
    "ConcurrentFn",
    "OptimizerStep",
    "StepContext",
    "Strategy",
    "TrainingConfig",
    "framework_of",
    "model_flops_per_step",
    "optimizer_state_bytes",
    "priced_between_powers_of_two",
]

MiB = 1024**2
GiB = 1024**3

# Bytes of one stored element per compute dtype (from the one dtype table): tf32 is a matmul mode of
# fp32 tensors, stored as fp32; fp8 training runs FP8 GEMMs on tensors stored in bf16.
COMPUTE_DTYPES = {
    **{name: DTYPE_BYTES[name] for name in ("fp32", "tf32", "bf16", "fp16")},
    "fp8": DTYPE_BYTES["bf16"],
}
# torch DDP's bucket sizes: bucket_cap_mb=25 and the first bucket's dist._DEFAULT_FIRST_BUCKET_BYTES
# (1 MiB; torch/nn/parallel/distributed.py). The only place trainsim states them.
DDP_BUCKET_BYTES = 25 * MiB
DDP_FIRST_BUCKET_BYTES = 1 * MiB


# fp32 optimizer state bytes per parameter, master weights excluded (ZeRO paper, section 3.1): 4 bytes
# per state tensor torch.optim keeps (data/efficiency.yaml, optimizers.kinds.*.state_tensors).
class _StateBytes(Mapping[str, int]):
    """Optimizer name -> fp32 state bytes per parameter; the names need no data file, the bytes
    read it on first use (so a --help that lists the names stays light)."""

    def __iter__(self) -> Iterator[str]:
        return iter(optimizer_names())

    def __len__(self) -> int:
        return len(optimizer_names())

    def __contains__(self, name: object) -> bool:
        return name in optimizer_names()

    def __getitem__(self, name: str) -> int:
        if name not in optimizer_names():
            raise KeyError(name)
        return len(optimizer_spec(name).state_tensors) * DTYPE_BYTES["fp32"]


OPTIMIZERS: Mapping[str, int] = _StateBytes()
# What the simulated rank is gated by when jitter is drawn (see TrainingConfig.jitter_scope).
JITTER_SCOPES = ("step", "sync")
# While a collective kernel runs, concurrent compute is this much slower where the device's SM count
# is unknown (CPU ranks, test timers). Our estimate, not a measurement: NCCL ring/tree kernels occupy
# one SM per channel and typically 8-16 channels run on an A100 (108 SMs), i.e. 7-15 % of the SMs,
# plus HBM traffic of the copies. A calibration profile's comm_compute_slowdown replaces the
# per-collective model (StepContext.contention).
DEFAULT_COMM_COMPUTE_SLOWDOWN = 1.10


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """How one training step is run, independent of the strategy's sharding.

    ``global_batch`` samples per step over all GPUs; each GPU runs micro-batches of ``micro_batch``
    samples and accumulates gradients over :meth:`accumulation_steps` of them. ``dtype`` is the
    compute dtype; with ``bf16``/``fp16`` and ``master_weights`` the optimizer keeps fp32 master
    weights (mixed precision). ``wrap`` is the FSDP wrapping policy: ``"per-block"``,
    ``"every-N-layers"``, ``"every-N-blocks"`` or a tuple of layer indices where units begin.
    ``steps`` > 1 with ``compute_jitter_sigma`` > 0 draws lognormal compute slowdowns from the
    simulation's seeded RNG: ``jitter_scope="step"`` draws one factor per rank per step and the
    slowest rank gates the whole step's compute; ``"sync"`` draws one per rank per synchronisation
    point (every collective the step waits on), so the slowest rank of each interval gates it and
    the step pays the expected maximum once per sync point (see :mod:`simcore.strategies.runner`).

    ``precision`` (:mod:`simcore.compute.precision`) decides each tensor's and each collective's
    dtype per strategy; ``optimizer_impl`` how torch.optim runs the update
    (:mod:`simcore.compute.optimizer`); both are read by the time and the memory model alike.
    ``batch_per_gpu`` (weak scaling) replaces ``global_batch`` at each GPU count:
    ``global batch = batch_per_gpu x gpus`` (:meth:`for_gpus`). ``gradient_sync_every_micro_batch``:
    FSDP reduce-scatters every micro-batch's gradients (FSDP2's default); False is
    ``set_requires_gradient_sync(False)`` on all but the last micro-batch (unsharded gradients
    accumulate in full, one reduce-scatter per step). ``compile``: the model runs under torch.compile
    (fused memory-bound kernels, :mod:`simcore.compute.memory_kernels`); off is eager, the documented
    default of torch, torchtitan, HF Trainer and Megatron's own loop. ``software_era``: the
    convolution library's era when older than today's (``efficiency.yaml`` ``software_eras``).
    ``power_limit_w``: a board power limit below the device's default slows its kernels
    (:mod:`simcore.compute.power`); None runs at the default limit. ``rank_spread``: a synchronous
    step computes at the expected slowest of its GPUs (:mod:`simcore.compute.rank_spread`).
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
    # FSDP2 keeps the root module gathered after forward unless reshard_after_forward=True is
    # passed to it explicitly (fully_shard's default None); True: the root is resharded as well
    reshard_root_after_forward: bool = False
    wrap: str | tuple[int, ...] = "per-block"
    zero3_prefetch_bucket_params: int = 50_000_000  # DeepSpeed stage3_prefetch_bucket_size default
    # DeepSpeed stage3_max_live_parameters (elements); None = DeepSpeed's default (data/efficiency.yaml)
    zero3_max_live_params: int | None = None
    # DeepSpeed stage3_max_reuse_distance (elements); None = DeepSpeed's default (data/efficiency.yaml)
    zero3_max_reuse_distance: int | None = None
    # DeepSpeed 2021 (v0.3.13-v0.5.4): one list collective per parameter tensor, one view and one copy
    # per rank, the device synchronized at each fetch (simcore/strategies/deepspeed.py); False: the
    # flat-buffer collectives DeepSpeed has used since (PR #1188)
    zero3_per_rank_lists: bool = False
    # DeepSpeed ZeRO-1/2 (deepspeed/runtime/zero/config.py defaults): reduce_bucket_size and
    # allgather_bucket_size in elements; overlap_comm None = DeepSpeed's default (stage == 3).
    zero_bucket_elements: int = 500_000_000
    zero_allgather_bucket_elements: int = 500_000_000
    zero_overlap_comm: bool | None = None
    activation_checkpointing: bool = False
    comm_compute_slowdown: float | None = None
    # Memory besides tensors per GPU: None models it (CUDA context, NCCL buffers per communicator,
    # caching-allocator fragmentation: simcore.compute.memory.runtime_memory); a number replaces it.
    allocator_overhead_bytes: int | None = None
    steps: int = 1
    compute_jitter_sigma: float = 0.0
    # torch.optim implementation ("auto": foreach on GPUs, single-tensor on CPUs, as torch picks;
    # DeepSpeed's FusedAdam for ZeRO); it sets the step's time and its scratch memory.
    optimizer_impl: str = "auto"
    precision: str = "auto"
    # FP8 recipe (simcore.compute.fp8): none, tensorwise, rowwise (torchao), delayed (Transformer
    # Engine, what dtype "fp8" means); a recipe other than none runs with dtype "fp8"
    fp8: str = "none"
    batch_per_gpu: int | None = None
    gradient_sync_every_micro_batch: bool = True
    jitter_scope: str = "step"
    compile: bool = False
    software_era: str = "current"
    power_limit_w: float | None = None
    # the slowest of the step's GPUs gates it (simcore.compute.rank_spread); off where explicit
    # per-rank speeds are simulated (stragglers, jitter, mixed devices)
    rank_spread: bool = True
    # host syncs per step of the training loop (None: its framework's, simcore/data/host_syncs.yaml)
    host_syncs_per_step: float | None = None
    # whose cross entropy runs the loss: "torch" (F.cross_entropy, loss_parallel) or "megatron"
    # (vocab-parallel, in place): simcore.compute.memory.cross_entropy_working_bytes
    cross_entropy: str = "torch"

    def __post_init__(self) -> None:
        for name in ("global_batch", "micro_batch", "steps", "bucket_size_bytes", "first_bucket_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainsimError(f"training config: {name} must be a positive integer, got {value!r}")
        if self.power_limit_w is not None and not (
            isinstance(self.power_limit_w, (int, float)) and 0 < self.power_limit_w < float("inf")
        ):
            raise TrainsimError(
                f"training config: power_limit_w must be a positive number of watts, got {self.power_limit_w!r}"
            )
        if self.host_syncs_per_step is not None and not 0 <= self.host_syncs_per_step <= 1000:
            raise TrainsimError(
                f"training config: host_syncs_per_step must be 0..1000, got {self.host_syncs_per_step!r}"
            )
        if self.seq_len is not None and self.seq_len < 1:
            raise TrainsimError(f"training config: seq_len must be a positive integer, got {self.seq_len!r}")
        if self.cross_entropy not in CROSS_ENTROPY_KERNELS:
            raise TrainsimError(
                f"training config: cross_entropy {self.cross_entropy!r} is not known; allowed: "
                f"{', '.join(CROSS_ENTROPY_KERNELS)}"
            )
        if self.dtype not in COMPUTE_DTYPES:
            raise TrainsimError(
                f"training config: dtype {self.dtype!r} is not allowed; allowed: {', '.join(COMPUTE_DTYPES)}"
            )
        if self.dtype == "fp8" and self.fp8 == "none":
            object.__setattr__(self, "fp8", "delayed")  # --dtype fp8 is --fp8 delayed
        if self.fp8 not in FP8_RECIPES or (self.fp8 != "none") != (self.dtype == "fp8"):
            raise TrainsimError(
                f"training config: fp8 recipe {self.fp8!r} with dtype {self.dtype!r}; allowed: "
                f"{', '.join(FP8_RECIPES)}, a recipe other than none with dtype fp8"
            )
        if self.precision not in PRECISION_MODES:
            raise TrainsimError(
                f"training config: precision {self.precision!r} is not known; allowed: {', '.join(PRECISION_MODES)}"
            )
        if self.batch_per_gpu is not None and (
            isinstance(self.batch_per_gpu, bool)
            or not isinstance(self.batch_per_gpu, int)
            or self.batch_per_gpu < 1
        ):
            raise TrainsimError(
                f"training config: batch_per_gpu must be a positive integer, got {self.batch_per_gpu!r}"
            )
        if self.jitter_scope not in JITTER_SCOPES:
            raise TrainsimError(
                f"training config: jitter_scope {self.jitter_scope!r} unknown; allowed: {', '.join(JITTER_SCOPES)}"
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
        if (
            self.allocator_overhead_bytes is not None and self.allocator_overhead_bytes < 0
        ) or self.compute_jitter_sigma < 0:
            raise TrainsimError(
                "training config: allocator_overhead_bytes and compute_jitter_sigma must be >= 0"
            )
        if self.zero3_prefetch_bucket_params < 1:
            raise TrainsimError("training config: zero3_prefetch_bucket_params must be >= 1")
        if self.zero3_max_reuse_distance is not None and self.zero3_max_reuse_distance < 0:
            raise TrainsimError(
                "training config: zero3_max_reuse_distance must be >= 0 (or unset: DeepSpeed's 1e9)"
            )
        if self.zero3_max_live_params is not None and self.zero3_max_live_params < 1:
            raise TrainsimError(
                "training config: zero3_max_live_params must be >= 1 (or unset: DeepSpeed's 1e9)"
            )
        if IMPL_ALIASES.get(self.optimizer_impl, self.optimizer_impl) not in OPTIMIZER_IMPLS:
            raise TrainsimError(
                f"training config: optimizer_impl {self.optimizer_impl!r} is not known; "
                f"allowed: {', '.join(OPTIMIZER_IMPLS)}"
            )
        if self.batch_per_gpu is not None and self.batch_per_gpu % self.micro_batch:
            raise TrainsimError(
                f"training config: batch_per_gpu {self.batch_per_gpu} is not a multiple of the "
                f"micro-batch {self.micro_batch}"
            )

    def for_gpus(self, gpus: int) -> TrainingConfig:
        """This config at ``gpus`` GPUs: with ``batch_per_gpu`` (weak scaling) the global batch is
        ``batch_per_gpu x gpus``; otherwise the config itself."""
        if self.batch_per_gpu is None or self.global_batch == self.batch_per_gpu * gpus:
            return self
        return replace(self, global_batch=self.batch_per_gpu * gpus)

    def runtime_overhead_bytes(self, device_kind: str, communicators: int = 1) -> float:
        """Memory besides tensors per rank: the config's figure, else CUDA context + NCCL buffers."""
        if self.allocator_overhead_bytes is not None:
            return float(self.allocator_overhead_bytes)
        return runtime_memory(device_kind).overhead_bytes(communicators)

    def fragmentation(self, device_kind: str) -> float:
        """The caching allocator's reserved/allocated - 1 charged at the peak (0 when the overhead
        is given explicitly: the trackers validation counts tensors only)."""
        if self.allocator_overhead_bytes is not None:
            return 0.0
        return runtime_memory(device_kind).fragmentation

    def precision_for(self, strategy: str | Strategy) -> Precision:
        """The dtypes ``strategy`` runs with (:func:`simcore.compute.precision.resolve_precision`):
        a registered strategy, or a parameter-server mode's name."""
        name = strategy if isinstance(strategy, str) else strategy.name
        return resolve_precision(
            self.precision,
            self.dtype,
            name,
            framework=framework_of(strategy),
            master_weights=self.master_weights,
            fp8=self.fp8,
        )

    def accumulation_steps(self, gpus: int) -> int:
        """Micro-batches per GPU per step: global_batch / (gpus * micro_batch), which must divide."""
        if self.batch_per_gpu is not None:
            return self.batch_per_gpu // self.micro_batch
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
        return self.dtype not in ("fp32", "tf32")

    # The byte properties below describe the parameter server's precision (the strategies ask
    # precision_for(their name) and optimizer_state_bytes).
    @property
    def param_bytes(self) -> int:
        """Bytes per parameter of the copy the model holds (parameter-server precision)."""
        return self.precision_for("ps-sync").bytes("param")

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element as pushed and reduced (parameter-server precision)."""
        return self.precision_for("ps-sync").bytes("reduce")

    @property
    def optimizer_bytes(self) -> int:
        """Optimizer-state bytes per parameter (parameter-server precision)."""
        return optimizer_state_bytes(self.precision_for("ps-sync"), self.optimizer)

    def slowdown(self, calibrated: float | None) -> float | None:
        """The comm/compute slowdown in force: this config's, else the calibration's, else None:
        each collective's own, from the SMs its channels take (:meth:`StepContext.contention`)."""
        if self.comm_compute_slowdown is not None:
            return self.comm_compute_slowdown
        return calibrated


@functools.lru_cache(maxsize=1)
def contention_table() -> dict[str, Any]:
    """``data/efficiency.yaml``, section ``contention``."""
    return dict(data_file("efficiency.yaml")["contention"])


def optimizer_state_bytes(precision: Precision, optimizer: str) -> int:
    """Optimizer bytes per parameter: the fp32 master copy (mixed precision) plus the states, each in
    the state dtype (torch.optim keeps states in the dtype of what it updates); an unknown
    ``optimizer`` is a :class:`TrainsimError` naming the known ones."""
    states = len(optimizer_spec(optimizer).state_tensors)
    master = DTYPE_BYTES["fp32"] if precision.master else 0
    return master + states * precision.bytes("state")


class LayerTimer(Protocol):
    """What a strategy needs from :class:`simcore.compute.roofline.ComputeModel`."""

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float: ...

    def optimizer_time_s(self, params: int, optimizer: str) -> float: ...


@dataclass(frozen=True, slots=True)
class OptimizerStep:
    """One rank's optimizer step as a strategy runs it: its time, scratch memory and what it assumed."""

    seconds: float
    scratch_bytes: float
    impl: str


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
    # Results of pure functions of this context's workload, config and timer (span times, tensor
    # counts), which every micro-batch of a plan asks for again; shared by copies as _layer_times is.
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    concurrent: ConcurrentFn | None = None  # same-shape groups priced together (None: one at a time)
    nics_per_node: int = 0  # NICs on rank 0's host (0: unknown): network collectives' channel count
    # On a shallower copy of a model (simcore.fastpath.fold): the model's own context. Operations
    # over the whole model (the optimizer update, no-sync micro-batches run as one) take the model's
    # time there, so that a copy's plan is the model's with blocks removed.
    whole: StepContext | None = None
    # What a sweep's evaluations share (probes, folded copies, FSDP units): the sweep's own object,
    # shared by every copy of this context; a context made alone gets one of its own.
    caches: StepCaches = field(default_factory=StepCaches)

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

    def span_time(
        self, phase: str, layers: Sequence[int], *, kernel_extra_s: float = 0.0, host_extra_ops: float = 0.0
    ) -> float:
        """Seconds of ``layers`` in ``phase`` as one compute operation, with the framework's extra
        device work (``kernel_extra_s``: casts, copies) and host work (``host_extra_ops`` operator
        dispatches: hooks). On a GPU the host runs ahead, so the span takes the longer of its kernels
        and its dispatch; on a CPU rank they add (:meth:`ComputeModel.combine`)."""
        key = ("span", phase, tuple(layers), kernel_extra_s, host_extra_ops)
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = self._span_time(phase, layers, kernel_extra_s, host_extra_ops)
        return float(known)

    def layer_counts(self, layers: Sequence[int]) -> tuple[int, int, int]:
        """(parameters, parameter tensors, layers with parameters) of ``layers`` of this context's
        workload, once per context and run of layers: every strategy, pass and micro-batch of the
        context's plans asks again. Tensors as :func:`~simcore.compute.roofline.param_tensor_count`
        counts them (a sum over layers, so a run of layers has its layers' sum)."""
        key = ("layer counts", tuple(layers))
        known = self._memo.get(key)
        if known is None:
            model, per_kind = self.workload.layers, self._tensors_per_kind()
            chosen = [model[i] for i in key[1] if model[i].params]
            known = self._memo[key] = (
                sum(layer.params for layer in chosen),
                sum(per_kind[layer.kind] for layer in chosen),
                len(chosen),
            )
        return known

    def model_counts(self) -> tuple[int, int, int]:
        """:meth:`layer_counts` of the whole model."""
        known = self._memo.get(("model counts",))
        if known is None:
            known = self._memo[("model counts",)] = self.layer_counts(range(len(self.workload.layers)))
        return known

    def _tensors_per_kind(self) -> dict[str, int]:
        """Parameter tensors of one layer of each kind with parameters (param_tensor_count's rule)."""

        def count() -> dict[str, int]:
            workload, counts = self.workload, {}
            for layer in workload.layers:
                if layer.params > 0 and layer.kind not in counts:
                    counts[layer.kind] = param_tensor_count(replace(workload, layers=(layer,), ties=()))
            return counts

        return self.memo(("param tensors per kind",), count)

    def memo(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()``, once per ``key`` for this context (a pure function of its inputs)."""
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = compute()
        return known

    def _span_time(
        self, phase: str, layers: Sequence[int], kernel_extra_s: float, host_extra_ops: float
    ) -> float:
        kernel_s, host_s = self._span_sums(phase, layers)
        if host_s is None:  # a timer without a host/device split (test doubles)
            return kernel_s + kernel_extra_s
        host_s += host_extra_ops * self.host_op_s(phase)
        return float(self.timer.combine(kernel_s + kernel_extra_s, host_s))  # type: ignore[attr-defined]

    def _span_sums(self, phase: str, layers: Sequence[int]) -> tuple[float, float | None]:
        """(device seconds, host seconds) of ``layers`` in ``phase`` before any framework extras
        (host None for a timer without the split): what every strategy's span of these layers
        shares, so kept once per context whatever extras each strategy adds. ``math.fsum`` is
        correctly rounded, so a slice of consecutive layers sums to the same value as any order."""
        key = ("span sums", phase, tuple(layers))
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = self._sums(phase, key[2])
        return known

    def _sums(self, phase: str, layers: tuple[int, ...]) -> tuple[float, float | None]:
        contiguous = bool(layers) and layers[-1] - layers[0] + 1 == len(layers)
        parts = getattr(self.timer, "layer_parts_s", None)
        if parts is None:
            times = self.layer_times(phase)
            chosen = times[layers[0] : layers[-1] + 1] if contiguous else [times[i] for i in layers]
            return math.fsum(chosen), None
        kernel, host = self._parts(phase)
        if contiguous:
            first, end = layers[0], layers[-1] + 1
            return math.fsum(kernel[first:end]), math.fsum(host[first:end])
        return math.fsum([kernel[i] for i in layers]), math.fsum([host[i] for i in layers])

    def _parts(self, phase: str) -> tuple[list[float], list[float]]:
        kernel, host = self._layer_times.get(f"kernel:{phase}"), self._layer_times.get(f"host:{phase}")
        if kernel is None or host is None:
            kernel_s, host_s = self.timer.layer_parts_s(self.workload, self.config.micro_batch, phase)  # type: ignore[attr-defined]
            kernel = self._layer_times[f"kernel:{phase}"] = [*map(float, kernel_s)]
            host = self._layer_times[f"host:{phase}"] = [*map(float, host_s)]
        return kernel, host

    def contention(self, cost: CommCost) -> float:
        """How much slower compute runs while this collective runs: ``sms / (sms - channels)`` for
        the channels NCCL uses over the collective's limiting link (``data/efficiency.yaml``,
        ``contention``), and on a device of persistent GEMMs (Hopper) those GEMMs' two waves blended
        in (:meth:`_persistent_contention`, :mod:`simcore.compute.sm_sharing`);
        :data:`DEFAULT_COMM_COMPUTE_SLOWDOWN` where the device's SMs are unknown."""
        key = ("contention", cost.link_kind, self.nics_per_node)
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = self._contention(cost.link_kind)
        return float(known)

    def _contention(self, link_kind: str) -> float:
        sms = int(getattr(getattr(self.timer, "curve", None), "sms", 0) or 0)
        if sms <= 0:
            return DEFAULT_COMM_COMPUTE_SLOWDOWN
        table = contention_table()
        channels = table["channels"].get(link_kind, 0)
        if link_kind in table["network_kinds"] and self.nics_per_node > 0:
            # across nodes NCCL runs a fixed number of channels per NIC (the collective model's rule)
            channels = nccl_channels(2, self.nics_per_node)
        held = min(float(channels), sms - 1.0)
        device = getattr(self.timer, "device", None)
        if held > 0 and device is not None and runs_persistent_gemms(str(device.name)):
            return (self.whole or self)._persistent_contention(sms, held)
        return free_sm_slowdown(sms, held)

    def _persistent_contention(self, sms: int, channels: float) -> float:
        """The slowdown beside a collective holding ``channels`` SMs on a device of persistent GEMMs
        (:mod:`simcore.compute.sm_sharing`): forward and backward kernels' seconds, each GEMM layer's
        stretched by its waves (forward: its output tiles; backward: the data- and weight-gradient
        GEMMs', half its time each; a layer of unknown shape fills every SM), the rest by the SMs left."""
        import numpy as np

        gemm, m, k, n = self._gemm_shapes()
        mb = self.config.micro_batch
        parts: Callable[..., Any] = self.timer.layer_parts_s  # type: ignore[attr-defined]
        fwd, bwd = (
            np.asarray(parts(self.workload, mb, phase)[0], dtype=np.float64) for phase in ("fwd", "bwd")
        )
        rows = m * mb
        waves_fwd = persistent_gemm_waves_of(rows, n, sms, channels)
        waves_bwd = (
            persistent_gemm_waves_of(rows, k, sms, channels) + persistent_gemm_waves_of(k, n, sms, channels)
        ) / 2.0
        persistent = float(fwd[gemm].sum() + bwd[gemm].sum())
        stretched = float((fwd * waves_fwd)[gemm].sum() + (bwd * waves_bwd)[gemm].sum())
        other = float(fwd[~gemm].sum() + bwd[~gemm].sum())
        return overlap_slowdown(persistent, stretched, other, sms, channels)

    def _gemm_shapes(self) -> tuple[Any, Any, Any, Any]:
        """Which layers are GEMMs (kernel class ``gemm``) and their per-sample (m, k, n) (NaN where
        unknown), as arrays over the workload's layers (computed once per context)."""
        import numpy as np

        key = ("gemm shapes", id(self.workload))  # copies share the memo: keyed by their workload
        known = self._memo.get(key)
        if known is None or known[0] is not self.workload:
            layers = self.workload.layers
            gemm = np.array([kernel_class(layer.kind) == "gemm" for layer in layers], dtype=bool)
            shape = np.array([layer.gemm or (np.nan, np.nan, np.nan) for layer in layers], dtype=float)
            known = self._memo[key] = (self.workload, gemm, shape[:, 0], shape[:, 1], shape[:, 2])
        return known[1:]

    def timer_combine(self, kernel_s: float, host_ops: float, phase: str = "fwd") -> float:
        """Seconds of framework work of ``kernel_s`` device time and ``host_ops`` dispatches."""
        combine = getattr(self.timer, "combine", None)
        if combine is None:
            return kernel_s
        return float(combine(kernel_s, host_ops * self.host_op_s(phase)))

    def host_op_s(self, phase: str) -> float:
        """Host seconds per operator dispatch (0 for a timer that does not model the host)."""
        per_op = getattr(self.timer, "host_op_s", None)
        return float(per_op(phase)) if per_op is not None else 0.0

    def copy_time_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` in device memory (read + write) at the timer's memory bandwidth.

        ``memory_bandwidth_Bps`` counts bytes read plus written, as the calibration's copy probe
        does; a timer without one (a test double) copies for free.
        """
        bandwidth = getattr(self.timer, "memory_bandwidth_Bps", None)
        if not bandwidth or nbytes <= 0:
            return 0.0
        return 2.0 * float(nbytes) / float(bandwidth)

    @property
    def device_kind(self) -> str:
        """``gpu`` or ``cpu``: the kind of the timer's device (``gpu`` for a timer without one)."""
        return str(getattr(getattr(self.timer, "device", None), "kind", "gpu"))

    def precision(self, strategy: str | Strategy) -> Precision:
        """The dtypes ``strategy`` runs with (config's ``precision`` and ``dtype``)."""
        return self.config.precision_for(strategy)

    def optimizer_impl(self, strategy: str | Strategy) -> str:
        """The optimizer implementation ``strategy`` runs: the config's, else its framework's default."""
        return resolve_optimizer_impl(self.config.optimizer_impl, self.device_kind, framework_of(strategy))

    def optimizer_step(
        self, strategy: str | Strategy, params: float, shards: int, *, flat: bool = False
    ) -> OptimizerStep:
        """This rank's update of ``params`` parameters (its shard), split ``shards`` ways per tensor.

        ``flat``: the optimizer sees flat partitions (DeepSpeed ZeRO: one fp32 partition per
        parameter group) rather than the model's tensors. FSDP2's parameters are DTensors, whose
        every operator costs the host more (:func:`simcore.compute.overheads.framework_overheads`).
        With fp32 master weights the casts around the update are added
        (:func:`simcore.compute.optimizer.master_cast_bytes`). ``strategy``: a registered strategy,
        or a parameter-server mode's name (:func:`framework_of`).
        """
        framework = framework_of(strategy)
        whole = self.whole
        if whole is not None:
            local = params * whole.model_counts()[0] / self.model_counts()[0]
            return self.memo(  # the same for every copy of the model: computed once per context family
                (
                    "whole-model optimizer step",
                    id(whole.workload),
                    strategy if isinstance(strategy, str) else strategy.name,
                    framework,
                    local,
                    shards,
                    flat,
                    self.config,
                ),
                lambda: whole.optimizer_step(strategy, local, shards, flat=flat),
            )
        precision, impl = self.precision(strategy), self.optimizer_impl(strategy)
        tensors = 1 if flat else self.model_counts()[1]
        cost = optimizer_step_cost(self.config.optimizer, impl, params, tensors, precision.bytes("state"))
        if precision.master and params > 0:
            extra = master_cast_bytes(params, precision.bytes("param"))
            cost = replace(cost, bytes_moved=cost.bytes_moved + extra, kernels=cost.kernels + 2 * tensors)
        timed = getattr(self.timer, "optimizer_step_time_s", None)
        if timed is None:  # a test double: memory-bound update only
            seconds = self.timer.optimizer_time_s(round(params), self.config.optimizer)
        else:
            dtensor = framework == "torch-fsdp"  # FSDP2's parameters are DTensors
            factor = framework_overheads().dtensor_op_factor if dtensor else 1.0
            seconds = float(timed(cost, host_factor=factor))
        seconds += self.host_sync_s(framework)
        return OptimizerStep(seconds, self._optimizer_scratch(params, shards, impl, precision), impl)

    def host_sync_s(self, framework: str) -> float:
        """Exposed seconds of the host syncs ``framework``'s loop makes per step (``loss.item()``,
        ``clip_grad_norm_(...).item()``): :mod:`simcore.compute.host_syncs`; the config's
        ``host_syncs_per_step`` replaces the framework's count."""
        syncs = self.config.host_syncs_per_step
        count = syncs_per_step(framework) if syncs is None else syncs
        return host_sync_time_s(count, self.host_op_s("fwd"), device_kind=self.device_kind)

    def _optimizer_scratch(self, local_params: float, shards: int, impl: str, precision: Precision) -> float:
        """Scratch bytes of this rank's optimizer step (``temp`` while it runs).

        ``local_params``: parameters this rank updates; ``shards``: how many ways each parameter
        tensor is split (FSDP2 shards every tensor on its first dimension; a flat ZeRO partition is
        one tensor of ``local_params``). The largest tensor is taken as the largest layer's
        parameters (weight and bias of one layer together, a slight overestimate). The state has
        the precision's state dtype (:func:`simcore.compute.memory.optimizer_step_temp_bytes`).
        """
        largest_layer = self.memo(
            ("largest layer params",),
            lambda: max((layer.params for layer in self.workload.layers), default=0),
        )
        largest = largest_layer / shards
        return optimizer_step_temp_bytes(
            self.config.optimizer, impl, local_params, min(largest, local_params), precision.bytes("state")
        )

    def microbatch_compute_s(self) -> float:
        """Forward + backward (+ recompute with activation checkpointing) of one micro-batch."""
        every = range(len(self.workload.layers))
        phases = ("fwd", "bwd", "recompute") if self.config.activation_checkpointing else ("fwd", "bwd")
        return math.fsum(self.span_time(phase, every) for phase in phases)


class Strategy(Protocol):
    """A data-parallel strategy: a name, the facts about it that other modules ask, a plan builder.

    ``framework``: who runs it (``torch-ddp``, ``torch-fsdp``, ``deepspeed``), whose defaults pick
    its precision for ``--precision auto`` (:mod:`simcore.compute.precision`) and its optimizer
    implementation; ``zero_stage``: what it shards, as the ZeRO paper's stages (0 nothing, 1 the
    optimizer state, 2 and the gradients, 3 and the parameters:
    :func:`simcore.compute.memory.model_state_bytes`); ``shard_scope``: over whom (``world``:
    every data-parallel rank; ``node``: the ranks of one node, replicated across nodes);
    ``communicates_every_microbatch``: whether its communication runs in every micro-batch (so it
    shapes each pipeline pass) or only after the last one (DDP's no_sync, ZeRO-1's one reduction).
    """

    name: str
    description: str
    framework: str
    zero_stage: int
    shard_scope: str
    communicates_every_microbatch: bool

    def build_plan(self, ctx: StepContext) -> StepPlan: ...

    def assumption_note(self, ctx: StepContext) -> str:
        """A remark for the report on what the step assumed at this point ("" if none)."""
        ...


SHARD_SCOPES = ("world", "node")


def framework_of(strategy: str | Strategy) -> str:
    """The framework running ``strategy``: a strategy's own; for a name, the parameter server's
    (the parameter-server modes are not strategies of the registry)."""
    if not isinstance(strategy, str):
        return strategy.framework
    if strategy.startswith("ps"):
        return PARAMETER_SERVER_FRAMEWORK
    raise TrainsimError(
        f"strategy {strategy!r} is named, not given: pass the strategy itself (it knows its framework); "
        "only parameter-server modes (ps-*) go by name"
    )


def model_flops_per_step(workload: Workload, global_batch: int) -> float:
    """Model FLOPs of one step, recomputation excluded (the MFU numerator).

    Language models (tokens_per_sample > 0): 6 * N * tokens (Kaplan et al. 2020; PaLM's MFU,
    Chowdhery et al. 2022, appendix B, without the attention term). Others: forward + backward
    FLOPs of the workload per sample times the samples.
    """
    if workload.tokens_per_sample > 0:  # a mixture of experts: the parameters a token passes through
        return 6.0 * workload.active_params * workload.tokens_per_sample * global_batch
    return (workload.fwd_flops_per_sample + workload.bwd_flops_per_sample) * global_batch
