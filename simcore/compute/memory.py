"""Per-rank memory through a training step: what is allocated when, the peak and where it happens.

A :class:`MemoryTimeline` starts from what a rank holds between steps (parameters or their shard,
optimizer state, persistent communication buffers, framework overhead) and applies the changes
each operation of the step makes as the simulation runs it: activations saved in forward and freed
in backward, gradients as backward produces them, gathered FSDP units and prefetch buffers, bucket
copies. The peak is the largest total seen, labelled with the operation in progress ("forward of
block 12", "optimizer step").

Categories (bytes per rank): ``params`` (working copy, full or shard), ``grads``, ``optimizer``
(fp32 master weights + states, full or shard), ``activations``, ``buffers`` (gathered units,
unsharded gradients awaiting reduce-scatter, DDP bucket copies), ``temp`` (short-lived
temporaries: the partial gradients of a tied parameter before autograd sums them, the optimizer
step's scratch tensors, see :func:`optimizer_step_temp_bytes`) and ``overhead`` (CUDA context,
workspaces, allocator fragmentation).

Model-state bytes follow the ZeRO paper (Rajbhandari et al. 2020, section 5.1): with Psi parameters,
N data-parallel ranks and K optimizer bytes per parameter, DDP holds (2 + 2 + K) Psi, ZeRO-1
(2 + 2) Psi + K Psi / N, ZeRO-2 2 Psi + (2 + K) Psi / N and ZeRO-3 (2 + 2 + K) Psi / N.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from simcore.compute.optimizer import OPTIMIZER_IMPLS, resolve_optimizer_impl
from simcore.data import data_file
from simcore.errors import TrainsimError

__all__ = [
    "CATEGORIES",
    "CROSS_ENTROPY_KERNELS",
    "OPTIMIZER_IMPLS",
    "TIGHT_HEADROOM",
    "MemoryChange",
    "MemoryPeak",
    "MemoryTimeline",
    "RuntimeMemory",
    "cross_entropy_working_bytes",
    "model_state_bytes",
    "optimizer_step_temp_bytes",
    "resolve_optimizer_impl",
    "runtime_memory",
]

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers", "temp", "overhead")

# (category, signed bytes)
MemoryChange = tuple[str, float]


# Headroom below which "fits" is qualified: allocator spikes, a longer sequence or a different
# collective algorithm move the peak by a few percent.
TIGHT_HEADROOM = 0.10


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """The largest per-rank footprint of a step, when it happened and what it was made of."""

    peak_bytes: float
    phase: str
    breakdown: Mapping[str, float]
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def status(self) -> str:
        """``fits``, ``fits with < 10% headroom`` or ``OOM``."""
        if not self.fits:
            return "OOM"
        if self.capacity_bytes - self.peak_bytes < TIGHT_HEADROOM * self.capacity_bytes:
            return "fits with < 10% headroom"
        return "fits"

    def verdict(self) -> str:
        """One line: fits (with how much headroom), or out of memory by how much and where."""
        gib = 2**30  # the unit of the what-if table and plots (a "80 GB" A100 holds 80 GiB)
        if self.fits:
            return (
                f"{self.status}: peak {self.peak_bytes / gib:.1f} GiB of {self.capacity_bytes / gib:.1f} GiB "
                f"({self.phase})"
            )
        return (
            f"OOM: peak {self.peak_bytes / gib:.1f} GiB exceeds {self.capacity_bytes / gib:.1f} GiB by "
            f"{(self.peak_bytes - self.capacity_bytes) / gib:.1f} GiB during {self.phase}"
        )


@dataclass(slots=True)
class MemoryTimeline:
    """Running per-category totals of one rank, its peak, the (time, total, phase) samples (and,
    when asked, each sample's categories) and each category's own maximum over the step."""

    capacity_bytes: float
    fragmentation: float = 0.0  # reserved / allocated - 1 of the caching allocator, charged at the peak
    current: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    samples: list[tuple[float, float, str]] = field(default_factory=list)
    category_max: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    _peak: float = -1.0
    _peak_phase: str = ""
    _peak_breakdown: dict[str, float] = field(default_factory=dict)
    # When a dict: per phase, its largest total, when it was first reached, the categories then
    # and the phase's key (what simcore.fastpath.fold extrapolates to find a deeper model's peak).
    phase_peaks: dict[str, tuple[float, float, dict[str, float], object]] | None = None
    # The key of the phase at the peak (see apply).
    peak_key: object = None
    # When a list: beside each sample, the bytes of every category then, in CATEGORIES order (for a
    # trace or a report page; None on the paths that only need the peak).
    category_samples: list[tuple[float, ...]] | None = None

    def apply(
        self, changes: Iterable[MemoryChange], phase: str, time_s: float = 0.0, key: object = None
    ) -> None:
        """Apply allocations (+) and frees (-) made at ``time_s`` during ``phase``.

        ``key``: the phase as structure rather than text (whatever the caller names phases by: the
        step plans' operations), kept with the phase's peak so that nobody has to parse ``phase``.
        """
        changed = False
        for category, delta in changes:
            if category not in self.current:
                raise TrainsimError(f"memory category {category!r} unknown; allowed: {', '.join(CATEGORIES)}")
            self.current[category] += delta
            if self.current[category] > self.category_max[category]:
                self.category_max[category] = self.current[category]
            changed = True
        if not changed and self.samples:
            return
        total = sum(self.current.values())
        self.samples.append((time_s, total, phase))
        if self.category_samples is not None:
            self.category_samples.append(tuple(self.current.values()))
        if self.phase_peaks is not None:
            known = self.phase_peaks.get(phase)
            if known is None or total > known[0]:
                self.phase_peaks[phase] = (total, time_s, dict(self.current), key)
        if total > self._peak:
            self._peak = total
            self._peak_phase = phase
            self.peak_key = key
            self._peak_breakdown = dict(self.current)

    def peak(self) -> MemoryPeak:
        """The peak as the allocator sees it: tensors, plus fragmentation on them in ``overhead``."""
        if self._peak < 0:
            self.apply((), "start of step")
        return allocator_peak(
            self._peak, self._peak_phase, self._peak_breakdown, self.fragmentation, self.capacity_bytes
        )


def allocator_peak(
    total: float, phase: str, categories: Mapping[str, float], fragmentation: float, capacity_bytes: float
) -> MemoryPeak:
    """A footprint of ``total`` tensor bytes made of ``categories`` as the allocator holds it:
    fragmentation on the tensors, charged to ``overhead``."""
    breakdown = {c: max(0.0, categories.get(c, 0.0)) for c in CATEGORIES}
    tensors = sum(v for c, v in breakdown.items() if c != "overhead")
    extra = fragmentation * tensors
    breakdown["overhead"] += extra
    return MemoryPeak(total + extra, phase, breakdown, capacity_bytes)


@dataclass(frozen=True, slots=True)
class RuntimeMemory:
    """What the runtime and allocator hold besides tensors, per device kind (``data/efficiency.yaml``)."""

    cuda_context_bytes: float
    nccl_bytes_per_channel_peer: float
    nccl_channels: int
    nccl_peers: int
    fragmentation: float

    def overhead_bytes(self, communicators: int) -> float:
        """CUDA context plus NCCL's buffers for ``communicators`` communicators."""
        per_comm = self.nccl_bytes_per_channel_peer * self.nccl_channels * self.nccl_peers
        return self.cuda_context_bytes + communicators * per_comm


@functools.cache
def runtime_memory(device_kind: str) -> RuntimeMemory:
    """The runtime memory figures of ``device_kind`` (``gpu`` or ``cpu``), read once per process
    (every step plan asks for them, and parsing the table costs tens of milliseconds)."""
    table = data_file("efficiency.yaml")["allocator"]
    entry = table.get(device_kind, table["gpu"])
    return RuntimeMemory(
        float(entry["cuda_context_bytes"]),
        float(entry["nccl_bytes_per_channel_peer"]),
        int(entry["nccl_channels"]),
        int(entry["nccl_peers"]),
        float(entry["fragmentation"]),
    )


def model_state_bytes(
    stage: int, params: int, ranks: int, param_bytes: int, grad_bytes: int, optimizer_bytes: int
) -> dict[str, float]:
    """Parameters, gradients and optimizer state per rank for ZeRO ``stage`` 0 (DDP) to 3.

    ``ranks`` is the size of the group the state is sharded over (1 leaves everything full).
    """
    if stage not in (0, 1, 2, 3):
        raise TrainsimError(f"ZeRO stage {stage} unknown; allowed: 0, 1, 2, 3")
    if ranks < 1:
        raise TrainsimError(f"shard group size must be >= 1, got {ranks}")
    shard = params / ranks
    return {
        "params": (shard if stage >= 3 else params) * param_bytes,
        "grads": (shard if stage >= 2 else params) * grad_bytes,
        "optimizer": (shard if stage >= 1 else params) * optimizer_bytes,
    }


def optimizer_step_temp_bytes(
    optimizer: str, impl: str, local_params: float, largest_local_tensor: float, state_bytes: int
) -> float:
    """Scratch bytes the optimizer step allocates above its persistent state, at their largest.

    Adam/AdamW (``torch/optim/adam.py``, torch 2.13): the single-tensor loop computes
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` per parameter, so the
    ``sqrt()`` result and the quotient coexist: two temporaries the size of the largest local
    tensor (``_single_tensor_adam``). The foreach path computes
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)`` for all parameters at once
    and works in place after that: one extra copy of all local parameters (``_multi_tensor_adam``;
    AdamW's decoupled weight decay is in place). The fused kernel allocates nothing. SGD with or
    without momentum and no weight decay updates in place. ``state_bytes`` is bytes per element of
    the optimizer state (fp32: 4).
    """
    if optimizer not in ("adam", "adamw"):
        return 0.0
    if impl in ("single", "single-tensor"):
        return 2.0 * largest_local_tensor * state_bytes
    if impl == "foreach":
        return float(local_params) * state_bytes
    return 0.0


CROSS_ENTROPY_ELEM = 4  # torch's cross entropy works in fp32 on logits upcast with .float()
CROSS_ENTROPY_KERNELS = ("torch", "megatron")


def cross_entropy_working_bytes(
    logits: float, elem: int, vocab_parallel: bool = False, kernel: str = "torch"
) -> tuple[float, float]:
    """Bytes the cross entropy over ``logits`` elements holds while it runs, above what is held
    before it: (forward, backward).

    As PyTorch training loops write it (torchtitan ``loss_fn``: ``F.cross_entropy(pred.flatten(0,
    1).float(), labels)``; Hugging Face ``ForCausalLMLoss``: ``logits.float()`` then
    ``cross_entropy``), ``cross_entropy`` is ``log_softmax`` then ``nll_loss``
    (``aten/src/ATen/native/LossNLL.cpp``, ``cross_entropy_loss``):

    - forward: the logits in the compute dtype (``elem`` bytes, alive until the loop drops them),
      their fp32 copy (``_to_copy``; none when the logits are fp32 already) and the fp32
      log-softmax output exist at once; the copy is freed when ``cross_entropy`` returns (the
      copy's backward needs nothing), the log-softmax output is kept (saved for backward: the
      head's saved bytes, ``LOSS_BYTES_PER_LOGIT``);
    - backward: ``nll_loss_backward`` writes a dense fp32 gradient the size of the logits
      (``zeros_like`` then a scatter) and ``_log_softmax_backward_data`` a second one from it and
      the saved output, so two fp32 logit-sized tensors beside the saved one.

    ``vocab_parallel``: the logits are split over tensor-parallel ranks by vocabulary and the loss
    runs as torch's ``loss_parallel`` (``torch/distributed/tensor/parallel/loss.py``, what
    torchtitan enables with TP). Its ``_log_softmax`` is unfused: ``shifted = x - max`` and
    ``exp(shifted)`` (or then ``result = shifted - logsumexp``) coexist with the fp32 input, one
    fp32 tensor more in forward; ``_nll_loss_and_log_softmax_backward`` computes
    ``(zeros_like(x) scattered + exp(x)) * grad``: three fp32 logit-sized tensors at once beside
    the saved output.

    ``kernel="megatron"``: Megatron-Core's vocab-parallel cross entropy, whatever the tensor-parallel
    size (``megatron/core/tensor_parallel/cross_entropy.py``, ``_VocabParallelCrossEntropy`` and the
    fused ``cross_entropy_loss_fusion`` path alike): forward upcasts the logits once
    (``calculate_logits_max``: ``.float()``), then subtracts the max, exponentiates and normalises
    that fp32 copy in place and saves it as the softmax, so the logits and one fp32 copy; backward
    turns the saved softmax into the gradient in place (``grad_input = softmax``, ``mul_``), and
    only the cast of that gradient back to the logits' dtype is new.
    """
    if kernel not in CROSS_ENTROPY_KERNELS:
        raise TrainsimError(f"cross entropy {kernel!r} unknown; allowed: {', '.join(CROSS_ENTROPY_KERNELS)}")
    if kernel == "megatron":
        copy = 0.0 if elem == CROSS_ENTROPY_ELEM else CROSS_ENTROPY_ELEM * logits
        return elem * logits + copy, (0.0 if elem == CROSS_ENTROPY_ELEM else elem * logits)
    copy = 0.0 if elem == CROSS_ENTROPY_ELEM else CROSS_ENTROPY_ELEM * logits
    fp32_tensors = 3.0 if vocab_parallel else 2.0
    forward = elem * logits + copy + (fp32_tensors - 1.0) * CROSS_ENTROPY_ELEM * logits
    backward = fp32_tensors * CROSS_ENTROPY_ELEM * logits
    return forward, backward
