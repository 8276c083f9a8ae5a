"""Per-rank memory of a training step: the CUDA allocator on GPU, tracked tensor memory on CPU.

The CPU allocator keeps no statistics, so on CPU we count tensors ourselves, in two ways:

- every step, cheaply (:class:`TensorMemoryProbe`): the bytes of the distinct storages of this
  rank's parameters (local shards under FSDP), gradients and optimizer state, plus the
  activations autograd saved for backward during the forward pass (counted with
  ``torch.autograd.graph.saved_tensors_hooks``, storages deduplicated, parameters excluded). The
  step's ``peak_memory_bytes`` is their sum: every activation saved at the end of forward plus every
  gradient at the end of backward. That is an upper bound on those categories' true peak
  (backward frees activations while it creates gradients) and ignores what no tensor we can see
  holds: DDP's bucket copies, FSDP2's transient all-gather and reduce-scatter buffers,
  temporaries. Under FSDP2 the all-gathered (unsharded) parameters that autograd saves for backward
  are not this rank's parameter storages, so they count as activations. ``memory_source`` says
  ``"tracked_tensors"``.
- once, on a probe step (:func:`mem_tracker_peak`): torch's own
  ``torch.distributed._tools.mem_tracker.MemTracker``, a dispatch mode that sees every allocation
  including temporaries and communication buffers, reports the true peak by category. It slows
  the step it watches, so it runs only on the first (warm-up) step, whose time is excluded from
  the summaries; ``memory_source`` of that step says ``"mem_tracker"``.

On GPU ``torch.cuda.max_memory_allocated`` is reset each step and read after it
(``memory_source = "cuda_allocator"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

__all__ = ["TensorMemoryProbe", "mem_tracker_peak", "storage_bytes"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # DTensor under FSDP2: count this rank's shard
    return to_local() if callable(to_local) else tensor


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def storage_bytes(tensors: Iterable[torch.Tensor | None], exclude: set[int] | None = None) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        if tensor is None:
            continue
        ptr, nbytes = _storage_key(_local(tensor))
        if exclude is not None and ptr in exclude:
            continue
        seen[ptr] = nbytes
    return sum(seen.values())


def _optimizer_state_tensors(optimizer: Any) -> Iterator[torch.Tensor]:
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps its shard inside
    for state in getattr(inner, "state", {}).values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


class TensorMemoryProbe:
    """Counts one rank's parameters, gradients, optimizer state and saved activations on CPU."""

    def __init__(self, parameters: Callable[[], Iterable[torch.Tensor]], optimizer: Any = None) -> None:
        self._parameters = parameters
        self._optimizer = optimizer
        self._saved: dict[int, int] = {}
        self._param_ptrs: set[int] = set()
        self.activation_bytes = 0

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        """Wrap the forward pass: counts the distinct storages autograd saves for backward."""
        self._saved = {}
        self._param_ptrs = {_storage_key(_local(p))[0] for p in self._parameters()}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            with contextlib.suppress(RuntimeError):  # some wrapper tensors have no storage
                ptr, nbytes = _storage_key(_local(tensor))
                if ptr not in self._param_ptrs:
                    self._saved[ptr] = nbytes
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield
        self.activation_bytes = sum(self._saved.values())

    def breakdown(self) -> dict[str, int]:
        """Bytes by category now (call after backward, before gradients are cleared)."""
        params = list(self._parameters())
        parts = {
            "params": storage_bytes(params),
            "grads": storage_bytes(p.grad for p in params),
            "optimizer_state": storage_bytes(_optimizer_state_tensors(self._optimizer)),
            "activations": self.activation_bytes,
        }
        parts["peak"] = sum(parts.values())
        return parts


def mem_tracker_peak(
    step: Callable[[], Any], modules: Iterable[torch.nn.Module], optimizer: Any
) -> tuple[Any, dict[str, int] | None]:
    """Run ``step()`` under torch's MemTracker; returns its result and the peak bytes by category.

    The categories are MemTracker's (param, buffer, grad, act, temp, opt, oth) plus ``peak``. If the
    tracker cannot follow this setup (it is a private torch tool), the step still runs and the
    breakdown is ``None``.
    """
    try:
        from torch.distributed._tools.mem_tracker import MemTracker

        tracker = MemTracker()
        inner = getattr(optimizer, "optim", optimizer)
        tracker.track_external(*modules, inner)
    except Exception:
        return step(), None
    with tracker:
        result = step()
    try:
        snapshot = tracker.get_tracker_snapshot("peak")
    except Exception:
        return result, None
    cpu = next((v for k, v in snapshot.items() if getattr(k, "type", "") == "cpu"), None)
    if cpu is None:
        return result, None
    parts = {str(k).split(".")[-1].lower(): int(v) for k, v in cpu.items()}
    parts["peak"] = parts.pop("total", sum(parts.values()))
    return result, parts
