"""Single-GPU training steps of the plain-torch models of :mod:`calibrate.memory_truth`, eager and
compiled, in bf16 autocast with AdamW: step time and peak memory.

A step is what a training loop does every iteration: ``zero_grad(set_to_none=True)``, forward and
loss under :func:`torch.autocast`, backward, ``optimizer.step()``. The model is the plain-torch copy
of the preset it is compared with (parameter counts equal the preset's), its input a random batch.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from calibrate.compute.measure import time_calls_s
from calibrate.gpu_suite.plan import StepItem
from calibrate.memory_truth.models import MODELS, ModelSpec, _loss

__all__ = ["measure_step"]


def _spec(item: StepItem) -> ModelSpec:
    base = MODELS[item.model]
    return ModelSpec(base.name, base.factory, item.batch, item.seq_len, item.image_size, base.preset)


def measure_step(item: StepItem, device: torch.device, iters: int, compile_backend: str) -> dict[str, Any]:
    """Seconds per step (median over ``iters`` after two warm-up steps) and peak memory (CUDA only)."""
    spec = _spec(item)
    model = spec.build().to(device)
    generator = torch.Generator().manual_seed(0)
    inputs, target = (t.to(device) for t in spec.inputs(model, generator))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model, backend=compile_backend) if item.variant == "compiled" else model

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = _loss(run(inputs), target)
        loss.backward()
        optimizer.step()

    time_calls_s(step, 2, device)  # warm-up: compilation, optimizer state, allocator
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = time_calls_s(step, iters, device)
    row: dict[str, Any] = {
        "step_time_s": statistics.median(times),
        "step_time_min_s": min(times),
        "params": sum(p.numel() for p in model.parameters()),
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
    }
    if device.type == "cuda":
        row["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        row["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the next model starts from an empty cache (its peak is its own)
    return row
