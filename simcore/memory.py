"""Per-rank memory through a training step: what is allocated when, the peak and where it happens.

A :class:`MemoryTimeline` starts from what a rank holds between steps (parameters or their shard,
optimizer state, persistent communication buffers, framework overhead) and applies the changes
each operation of the step makes as the simulation runs it: activations saved in forward and freed
in backward, gradients as backward produces them, gathered FSDP units and prefetch buffers, bucket
copies. The peak is the largest total seen, labelled with the operation in progress ("forward of
block 12", "optimizer step").

Categories (bytes per rank): ``params`` (working copy, full or shard), ``grads``, ``optimizer``
(fp32 master weights + states, full or shard), ``activations``, ``buffers`` (gathered units,
unsharded gradients awaiting reduce-scatter, DDP bucket copies) and ``overhead`` (CUDA context,
workspaces, allocator fragmentation).

Model-state bytes follow the ZeRO paper (Rajbhandari et al. 2020, section 5.1): with Psi parameters,
N data-parallel ranks and K optimizer bytes per parameter, DDP holds (2 + 2 + K) Psi, ZeRO-1
(2 + 2) Psi + K Psi / N, ZeRO-2 2 Psi + (2 + K) Psi / N and ZeRO-3 (2 + 2 + K) Psi / N.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from simcore.errors import TrainsimError

__all__ = ["CATEGORIES", "MemoryChange", "MemoryPeak", "MemoryTimeline", "model_state_bytes"]

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers", "overhead")

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
        gb = 1e9
        if self.fits:
            return (
                f"fits: peak {self.peak_bytes / gb:.1f} GB of {self.capacity_bytes / gb:.1f} GB "
                f"({self.phase})"
            )
        return (
            f"OOM: peak {self.peak_bytes / gb:.1f} GB exceeds {self.capacity_bytes / gb:.1f} GB by "
            f"{(self.peak_bytes - self.capacity_bytes) / gb:.1f} GB during {self.phase}"
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
