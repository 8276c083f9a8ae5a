"""Collective data-parallel strategies as torch runs them: DDP, FSDP2, and ZeRO-like sharding.

Each strategy wraps a freshly built model and returns a :class:`CollectiveTrainer` whose
``train_step`` times the phases it can separate:

- ``forward_s``: the forward pass and loss (FSDP2: includes each block's parameter all-gather);
- ``backward_s``: the backward pass *including* the gradient communication torch overlaps with it
  (DDP's bucketed all-reduce; FSDP2's reduce-scatter, which it waits for at the end of backward);
- ``comm_s``: DDP and ZeRO-1 only: how long at least one gradient bucket's all-reduce was in
  flight (the union of each bucket's launch-to-completion interval, timed by a communication hook
  that does what DDP's default does: divide by the world size, all-reduce). It overlaps
  ``backward_s``; the part of it after the last gradient is computed is what the step exposes.
  FSDP2 offers no such hook: ``None``;
- ``optimizer_s``: the optimizer step (ZeRO-1: includes the broadcast of updated parameter
  partitions that ``ZeroRedundancyOptimizer.step`` performs).

Strategies (:data:`STRATEGIES`):

- ``ddp``: ``DistributedDataParallel`` with default buckets (25 MiB, first bucket 1 MiB).
- ``fsdp``: FSDP2 ``fully_shard`` on every block (CNN stage / transformer block) and the root,
  resharding after forward (ZeRO-3: parameters, gradients and optimizer state sharded).
- ``zero1``: DDP + ``torch.distributed.optim.ZeroRedundancyOptimizer`` (optimizer state sharded;
  gradients all-reduced in full; updated partitions broadcast after the step). This is ZeRO stage 1.
- ``zero2``: torch has no ZeRO-2 for DDP. We map it to FSDP2 with ``reshard_after_forward=False``,
  the documented counterpart of FSDP1's ``SHARD_GRAD_OP`` (ZeRO-2-like): gradients and optimizer
  state sharded, one parameter all-gather per step held from forward through backward, one
  gradient reduce-scatter. It moves the same bytes as DeepSpeed ZeRO-2 (reduce-scatter of
  gradients + all-gather of parameters) and has the same peak; it differs in keeping parameters
  sharded between steps (DeepSpeed keeps them whole). Records say ``"strategy": "zero2"`` and the
  provenance carries this note.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calibrate.memory_truth.probe import TensorMemoryProbe, mem_tracker_peak

__all__ = ["STRATEGIES", "STRATEGY_NOTES", "CollectiveTrainer", "StepResult", "loss_for", "make_trainer"]

STRATEGY_NOTES = {
    "ddp": "DistributedDataParallel, default buckets; all-reduce overlaps backward (inside backward_s)",
    "fsdp": "FSDP2 fully_shard per block + root, reshard_after_forward=True (ZeRO-3-like)",
    "zero1": "DDP + ZeroRedundancyOptimizer (ZeRO-1: optimizer state sharded)",
    "zero2": "FSDP2 fully_shard per block + root, reshard_after_forward=False (SHARD_GRAD_OP, "
    "ZeRO-2-like: grads+optimizer state sharded; params also sharded between steps, unlike DeepSpeed)",
}


@dataclass(slots=True)
class StepResult:
    """What one training step measured on this rank (times in seconds, memory in bytes)."""

    loss: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    slow_sleep_s: float = 0.0
    comm_s: float | None = None
    memory: dict[str, int] = field(default_factory=dict)
    memory_source: str = "tracked_tensors"
    extra: dict[str, Any] = field(default_factory=dict)


def loss_for(model_name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Cross-entropy over classes (cnn) or over every next-token position (transformer)."""
    if model_name == "transformer":
        return lambda logits, targets: F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        )
    return F.cross_entropy


def _init_momentum(optimizer: torch.optim.Optimizer) -> None:
    """Create SGD's momentum buffers as zeros now (same arithmetic as creating them on the first step:
    0 * momentum + grad == grad exactly), so checkpoints always have the same tensors to save."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


class CollectiveTrainer:
    """A wrapped model and its optimizer; one call of :meth:`train_step` is one training step."""

    def __init__(
        self,
        model: nn.Module,
        eval_model: nn.Module,
        optimizer: Any,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        device: torch.device,
        comm_timer: CommTimer | None = None,
    ) -> None:
        self.model = model
        self.comm_timer = comm_timer
        self.eval_model = eval_model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.device = device
        self.probe = TensorMemoryProbe(self.model.parameters, optimizer)
        self._last_compute_s = 0.0

    def _inner_optimizer(self) -> torch.optim.Optimizer:
        return getattr(self.optimizer, "optim", self.optimizer)

    def state_tensors(self) -> list[torch.Tensor]:
        """This rank's parameters and optimizer state (local shards), in a fixed order, for checkpoints."""
        tensors = [_local(p) for p in self.model.parameters()]
        inner = self._inner_optimizer()
        for group in inner.param_groups:
            tensors.extend(_local(inner.state[p]["momentum_buffer"]) for p in group["params"])
        return tensors

    def train_step(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        step: int = 0,
        slow_factor: float = 1.0,
        track_memory: bool = False,
    ) -> StepResult:
        """Forward, backward and optimizer step; ``slow_factor`` > 1 sleeps after forward for
        (factor - 1) x this rank's compute time (forward + the previous step's backward)."""
        del step  # every step is the same computation; only its data depends on the step
        if track_memory:
            result, parts = mem_tracker_peak(
                lambda: self._step(inputs, targets, slow_factor), [self.model], self.optimizer
            )
            if parts is not None:
                result.memory, result.memory_source = parts, "mem_tracker"
            return result
        return self._step(inputs, targets, slow_factor)

    def _step(self, inputs: torch.Tensor, targets: torch.Tensor, slow_factor: float) -> StepResult:
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        with self.probe.forward():
            loss = self.loss_fn(self.model(inputs), targets)
        _sync(self.device)
        after_forward = time.perf_counter()
        forward_s = after_forward - start
        slow_sleep_s = 0.0
        if slow_factor > 1.0:
            slow_sleep_s = (slow_factor - 1.0) * (forward_s + (self._last_compute_s or 2.0 * forward_s))
            time.sleep(slow_sleep_s)
        before_backward = time.perf_counter()
        loss.backward()
        _sync(self.device)
        after_backward = time.perf_counter()
        self.optimizer.step()
        memory = self.probe.breakdown()
        self.optimizer.zero_grad(set_to_none=True)
        _sync(self.device)
        end = time.perf_counter()
        self._last_compute_s = after_backward - before_backward
        result = StepResult(
            loss=float(loss.detach()),
            forward_s=forward_s,
            backward_s=after_backward - before_backward,
            optimizer_s=end - after_backward,
            slow_sleep_s=slow_sleep_s,
            comm_s=self.comm_timer.busy_s() if self.comm_timer is not None else None,
            memory=memory,
        )
        if self.device.type == "cuda":
            result.memory = {**memory, "peak": int(torch.cuda.max_memory_allocated(self.device))}
            result.memory_source = "cuda_allocator"
        return result

    @torch.no_grad()
    def accuracy(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Fraction of held-out predictions that are right (every position, for the transformer)."""
        logits = self.eval_model(inputs.to(self.device))
        return float((logits.argmax(dim=-1) == targets.to(self.device)).float().mean())


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sgd(params: Iterator[nn.Parameter] | list[Any], lr: float, momentum: float) -> torch.optim.SGD:
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
    _init_momentum(optimizer)
    return optimizer


class CommTimer:
    """Times DDP's gradient all-reduces: each bucket's interval from launch to completion."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []

    def busy_s(self) -> float:
        """Length of the union of the intervals (buckets queue behind each other), then reset."""
        total, reach = 0.0, float("-inf")
        for start, end in sorted(self.intervals):
            total += max(0.0, end - max(start, reach))
            reach = max(reach, end)
        self.intervals = []
        return total


def _timed_allreduce(timer, bucket):  # unannotated: DDP rejects string annotations on comm hooks
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    start = time.perf_counter()

    def finished(future: Any) -> torch.Tensor:
        timer.intervals.append((start, time.perf_counter()))
        return future.value()

    return allreduce_hook(None, bucket).then(finished)  # type: ignore[arg-type]


def _ddp(model: nn.Module, device: torch.device, timer: CommTimer) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    wrapped = DistributedDataParallel(model, device_ids=ids)
    wrapped.register_comm_hook(timer, _timed_allreduce)
    return wrapped


def _fully_shard(model: nn.Module, device: torch.device, world: int, reshard: bool) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def make_trainer(
    strategy: str,
    model: nn.Module,
    *,
    model_name: str,
    device: torch.device,
    world: int,
    lr: float,
    momentum: float,
) -> CollectiveTrainer:
    """Wrap ``model`` (already built, on CPU, identical on every rank) for ``strategy``."""
    loss_fn = loss_for(model_name)
    model = model.to(device)
    if strategy in ("ddp", "zero1"):
        timer = CommTimer()
        wrapped = _ddp(model, device, timer)
        if strategy == "ddp":
            optimizer: Any = _sgd(wrapped.parameters(), lr, momentum)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(
                wrapped.parameters(), optimizer_class=torch.optim.SGD, lr=lr, momentum=momentum
            )
            _init_momentum(optimizer.optim)
        return CollectiveTrainer(wrapped, model, optimizer, loss_fn, device, timer)
    if strategy in ("fsdp", "zero2"):
        sharded = _fully_shard(model, device, world, reshard=strategy == "fsdp")
        return CollectiveTrainer(sharded, sharded, _sgd(sharded.parameters(), lr, momentum), loss_fn, device)
    raise ValueError(f"not a collective strategy: {strategy!r}")


STRATEGIES = tuple(STRATEGY_NOTES)
