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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from simcore.errors import TrainsimError

__all__ = [
    "CATEGORIES",
    "OPTIMIZER_IMPLS",
    "MemoryChange",
    "MemoryPeak",
    "MemoryTimeline",
    "model_state_bytes",
    "optimizer_step_temp_bytes",
    "resolve_optimizer_impl",
]

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers", "temp", "overhead")
# How torch.optim runs the update: "auto" picks what torch picks for the device.
OPTIMIZER_IMPLS = ("auto", "foreach", "single-tensor", "fused")

# (category, signed bytes)
MemoryChange = tuple[str, float]


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

    def verdict(self) -> str:
        """One line: fits with headroom, or out of memory by how much and where."""
        gib = 2**30  # the unit of the what-if table and plots (a "80 GB" A100 holds 80 GiB)
        if self.fits:
            return (
                f"fits: peak {self.peak_bytes / gib:.1f} GiB of {self.capacity_bytes / gib:.1f} GiB "
                f"({self.phase})"
            )
        return (
            f"OOM: peak {self.peak_bytes / gib:.1f} GiB exceeds {self.capacity_bytes / gib:.1f} GiB by "
            f"{(self.peak_bytes - self.capacity_bytes) / gib:.1f} GiB during {self.phase}"
        )


@dataclass(slots=True)
class MemoryTimeline:
    """Running per-category totals of one rank, its peak, the (time, total, phase) samples and
    each category's own maximum over the step."""

    capacity_bytes: float
    current: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    samples: list[tuple[float, float, str]] = field(default_factory=list)
    category_max: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    _peak: float = -1.0
    _peak_phase: str = ""
    _peak_breakdown: dict[str, float] = field(default_factory=dict)

    def apply(self, changes: Iterable[MemoryChange], phase: str, time_s: float = 0.0) -> None:
        """Apply allocations (+) and frees (-) made at ``time_s`` during ``phase``."""
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
        if total > self._peak:
            self._peak = total
            self._peak_phase = phase
            self._peak_breakdown = dict(self.current)

    def peak(self) -> MemoryPeak:
        if self._peak < 0:
            self.apply((), "start of step")
        breakdown = {c: max(0.0, self._peak_breakdown.get(c, 0.0)) for c in CATEGORIES}
        return MemoryPeak(self._peak, self._peak_phase, breakdown, self.capacity_bytes)


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


def resolve_optimizer_impl(impl: str, device_kind: str) -> str:
    """The optimizer implementation in force: ``impl``, or torch's default for ``device_kind``.

    torch.optim picks foreach kernels when every parameter is a plain tensor on a device with
    foreach support (CUDA, XPU, MTIA, privateuse1) and the single-tensor loop otherwise; fused is
    never the default (``torch/optim/optimizer.py``, ``_default_to_fused_or_foreach`` and
    ``torch/utils/_foreach_utils.py``, ``_get_foreach_kernels_supported_devices``, torch 2.13).
    """
    if impl not in OPTIMIZER_IMPLS:
        raise TrainsimError(
            f"optimizer implementation {impl!r} unknown; allowed: {', '.join(OPTIMIZER_IMPLS)}"
        )
    if impl != "auto":
        return impl
    return "single-tensor" if device_kind == "cpu" else "foreach"


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
    if impl == "single-tensor":
        return 2.0 * largest_local_tensor * state_bytes
    if impl == "foreach":
        return float(local_params) * state_bytes
    return 0.0
