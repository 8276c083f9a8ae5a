"""Per-worker memory of a parameter-server run.

A worker holds a full working copy of the parameters and of one gradient, the activations of one
micro-batch and the framework overhead; the optimizer state (fp32 master weights and moments) lives
on the servers. A colocated worker also holds the shards it serves: their optimizer state, and in
ps-sync the fp32 accumulator the W gradients are summed into. The peak is at the end of the
forward pass (all activations saved) or at the end of backward (all gradients), whichever is more.
A dedicated server device holds its shards' working copy (what it sends on a pull), their optimizer
state and, in ps-sync, the accumulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simcore.compute.memory import CATEGORIES, MemoryPeak

if TYPE_CHECKING:
    from simcore.strategies.base import TrainingConfig
    from simcore.workload.types import Workload

__all__ = ["activation_bytes", "served_params_per_worker", "server_peak", "worker_peak"]

FP32_ACCUMULATOR_BYTES = 4  # ps-sync sums the step's gradients into an fp32 buffer per served parameter


def activation_bytes(workload: Workload, micro_batch: int, checkpointing: bool) -> float:
    """Activations saved for backward by one micro-batch (block inputs + one block under checkpointing)."""
    layers = workload.layers
    if not checkpointing:
        return micro_batch * sum(layer.activation_bytes for layer in layers)
    per_block: dict[int, float] = {}
    outside = 0.0
    for layer in layers:
        if layer.block < 0:
            outside += layer.activation_bytes
        else:
            per_block[layer.block] = per_block.get(layer.block, 0.0) + layer.activation_bytes
    block_inputs = {layer.block: layer.output_bytes for layer in layers if layer.block >= 0}
    return micro_batch * (outside + sum(block_inputs.values()) + max(per_block.values(), default=0.0))


def worker_peak(
    config: TrainingConfig,
    capacity_bytes: float,
    served_params: int,
    *,
    params: int,
    activations: float,
    accumulate: bool,
) -> MemoryPeak:
    """One worker of a ``params``-parameter model that also serves ``served_params`` (0 when not colocated).

    ``activations``: :func:`activation_bytes` of one micro-batch.
    """
    state = served_params * (config.optimizer_bytes + (FP32_ACCUMULATOR_BYTES if accumulate else 0))
    base = {
        "params": params * config.param_bytes,
        "optimizer": float(state),
        "overhead": config.runtime_overhead_bytes("gpu", 1),
    }
    grads = params * config.grad_bytes
    if activations >= grads:
        breakdown, phase = {**base, "activations": activations}, "end of forward"
    else:
        breakdown, phase = {**base, "grads": float(grads)}, "end of backward (gradient ready to push)"
    full = {c: float(breakdown.get(c, 0.0)) for c in CATEGORIES}
    return MemoryPeak(sum(full.values()), phase, full, capacity_bytes)


def served_params_per_worker(
    server_devices: Sequence[str], shard_params: Sequence[int], worker_devices: Sequence[str]
) -> list[int]:
    """Parameters each worker serves (colocated shards on its device)."""
    by_device: dict[str, int] = {}
    for device, params in zip(server_devices, shard_params, strict=True):
        by_device[device] = by_device.get(device, 0) + params
    return [by_device.get(d, 0) for d in worker_devices]


def server_peak(
    config: TrainingConfig, capacity_bytes: float, served_params: int, *, accumulate: bool
) -> MemoryPeak:
    """A dedicated server device: a working copy of its shards to send, their optimizer state, overhead."""
    breakdown = dict.fromkeys(CATEGORIES, 0.0)
    breakdown["params"] = float(served_params * config.param_bytes)
    breakdown["optimizer"] = float(served_params * config.optimizer_bytes)
    breakdown["buffers"] = float(served_params * FP32_ACCUMULATOR_BYTES) if accumulate else 0.0
    breakdown["overhead"] = config.runtime_overhead_bytes("gpu", 1)
    return MemoryPeak(sum(breakdown.values()), "server shard state", breakdown, capacity_bytes)
