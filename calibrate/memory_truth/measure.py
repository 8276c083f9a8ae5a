"""The measuring half of ``calibrate.memory_truth`` (torch): one tracked step per grid point.

See :mod:`calibrate.memory_truth.cli` for what is measured and how; run by its ``main`` once the
options are known to be good.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from calibrate.common.records import RecordWriter, provenance, resume_keys
from calibrate.memory_truth.models import (
    MODELS,
    ModelSpec,
    _loss,
    bert_base,
    gpt2_small,
    gpt2_tiny,
    resnet50,
    resnet_tiny,
)
from calibrate.memory_truth.options import OPTIMIZERS, STRATEGIES
from simcore.errors import TrainsimError
from simcore.progress import bar

__all__ = [
    "CATEGORIES",
    "CATEGORY_MAP",
    "MODELS",
    "ModelSpec",
    "bert_base",
    "gpt2_small",
    "gpt2_tiny",
    "grid_points",
    "limit_threads",
    "measure",
    "measure_grid",
    "measured_points",
    "resnet50",
    "resnet_tiny",
]

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers", "temp")
# Tracker category (the enum's value) -> ours; "Optstate"/"OptState" is split into state and temp later.
CATEGORY_MAP = {
    "Parameter": "params",
    "Sharded Param": "params",
    "Buffer": "params",
    "Gradient": "grads",
    "Sharded Grad": "grads",
    "Optstate": "optimizer",
    "OptState": "optimizer",
    "Activation": "activations",
    "Inputs": "activations",
    "Other": "buffers",
    "Unsharded Param": "buffers",
    "Unsharded Grad": "buffers",
    "All Gather": "buffers",
    "Reduce Scatter": "buffers",
    "Temp": "temp",
}


# --- measurement ----------------------------------------------------------------------------------
@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    """This process as rank 0 of a fake process group of ``world_size`` ranks (no other processes)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _make_optimizer(name: str, params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "sgd-momentum" else 0.0)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # DTensor (FSDP2 shard): this rank's part
    return to_local() if callable(to_local) else tensor


def _storage_bytes(tensors: Iterator[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = _local(tensor).untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _wrap(model: nn.Module, strategy: str) -> tuple[nn.Module, dict[int, torch.Tensor]]:
    """DDP (with a bucket-recording communication hook) or FSDP2 per block; the bucket list fills in warm-up."""
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        blocks = getattr(model, "blocks", None)
        if not isinstance(blocks, nn.ModuleList):
            raise TrainsimError(
                f"FSDP2 wraps each of the model's `blocks` (an nn.ModuleList); {type(model).__name__} has none"
            )
        for block in blocks:
            fully_shard(block)
        return fully_shard(model), {}  # type: ignore[return-value]  # an FSDPModule is the same module
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    buckets: dict[int, torch.Tensor] = {}
    ddp = DistributedDataParallel(model)

    def record_and_allreduce(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        buckets[bucket.index()] = buffer
        dist.all_reduce(buffer.div_(dist.get_world_size()))
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(buffer)
        return future

    # DDP checks the hook's annotations against the real classes (ours are strings under PEP 563)
    record_and_allreduce.__annotations__ = {
        "state": object,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    ddp.register_comm_hook(None, record_and_allreduce)
    return ddp, buckets  # the hook fills the bucket dict during warm-up


def _ours(raw: dict[Any, int]) -> dict[str, int]:
    """A tracker snapshot (one device) in our categories, unsplit."""
    ours = dict.fromkeys(CATEGORIES, 0)
    for key, value in raw.items():
        name = getattr(key, "value", str(key))
        if name != "Total":
            ours[CATEGORY_MAP.get(name, "temp")] += int(value)
    return ours


def _split_peak(raw: dict[str, int], optimizer_state_bytes: int) -> dict[str, int]:
    """Our categories from the tracker's peak snapshot; optimizer transients go to ``temp``."""
    ours = _ours(raw)
    state = min(ours["optimizer"], optimizer_state_bytes)
    ours["temp"] += ours["optimizer"] - state
    ours["optimizer"] = state
    return ours


def measure(
    spec: ModelSpec, strategy: str, world_size: int, *, optimizer: str = "adamw", seed: int = 0
) -> dict[str, Any]:
    """One tracked training step of ``spec`` as rank 0 of ``world_size`` under ``strategy``; a record."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    if strategy not in STRATEGIES or optimizer not in OPTIMIZERS or world_size < 1:
        raise TrainsimError(
            f"memory truth: strategy must be one of {STRATEGIES}, optimizer one of {OPTIMIZERS}, "
            f"world size >= 1; got {strategy!r}, {optimizer!r}, {world_size}"
        )
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    with fake_world(world_size):
        model = spec.build()
        inputs, targets = spec.inputs(model, generator)
        wrapped, buckets = _wrap(model, strategy)
        opt = _make_optimizer(optimizer, wrapped.parameters())

        after_forward: dict[str, int] = {}

        def step(marks: list[float] | None = None) -> None:
            x = inputs.clone()  # made inside the tracker, so the input batch counts as activation memory
            loss = _loss(wrapped(x), targets)
            if marks is not None:
                after_forward.update(_ours(_cpu(tracker.get_tracker_snapshot("current"))))
            _mark(marks)
            loss.backward()
            _mark(marks)
            opt.step()
            opt.zero_grad(set_to_none=True)
            _mark(marks)

        def _mark(marks: list[float] | None) -> None:
            if marks is not None:
                marks.append(_total(tracker.get_tracker_snapshot("peak")))

        for _ in range(2 if strategy == "ddp" else 1):
            step()
        tracker: MemTracker
        if strategy == "fsdp":
            tracker = FSDPMemTracker(wrapped, opt)
        else:
            tracker = MemTracker()
            tracker.track_external(wrapped, opt, *buckets.values())
        marks: list[float] = []
        start = time.perf_counter()
        with tracker:
            step(marks)
        elapsed = time.perf_counter() - start
        raw = {
            getattr(k, "value", str(k)): int(v) for k, v in _cpu(tracker.get_tracker_snapshot("peak")).items()
        }
        state = _storage_bytes(
            t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)
        )
        record = _record(spec, strategy, world_size, optimizer, raw, state, marks, elapsed, tracker)
        record["after_forward"] = after_forward
        record["params_local_bytes"] = _storage_bytes(iter(list(wrapped.parameters())))
        record["bucket_bytes"] = sum(b.untyped_storage().nbytes() for b in buckets.values())
    return record


def _cpu(snapshot: dict[Any, dict[Any, int]]) -> dict[Any, int]:
    return next((v for k, v in snapshot.items() if getattr(k, "type", str(k)) == "cpu"), {})


def _total(snapshot: dict[Any, dict[Any, int]]) -> float:
    return float(_cpu(snapshot).get("Total", 0))


def _record(
    spec: ModelSpec,
    strategy: str,
    world_size: int,
    optimizer: str,
    raw: dict[str, int],
    state: int,
    marks: list[float],
    elapsed: float,
    tracker: object,
) -> dict[str, Any]:
    peak = raw.get("Total", sum(raw.values()))
    phases = ("forward", "backward", "optimizer step")
    phase = next((name for name, total in zip(phases, marks, strict=False) if total >= peak), phases[-1])
    return {
        "kind": "memory_truth",
        "model": spec.name,
        "factory": spec.factory,
        "preset": spec.preset,
        "strategy": strategy,
        "world_size": world_size,
        "rank": 0,
        "batch": spec.batch,
        "seq_len": spec.seq_len or None,
        "image_size": spec.image_size or None,
        "dtype": "fp32",
        "optimizer": optimizer,
        "device": "cpu",
        "peak_bytes": peak,
        "peak_phase": phase,
        "measured": _split_peak(raw, state),
        "tracker": type(tracker).__name__,
        "tracker_peak": {k: v for k, v in raw.items() if k != "Total"},
        "optimizer_state_bytes": state,
        "tracked_step_s": round(elapsed, 3),
    }


GridPoint = tuple[str, str, int, str]  # model, strategy, world size, optimizer: one record


def grid_points(
    models: Sequence[str], strategies: Sequence[str], world_sizes: Sequence[int], optimizer: str
) -> list[GridPoint]:
    """Every (model, strategy, world size, optimizer) to measure, in measuring order."""
    return [
        (name, strategy, world, optimizer)
        for name in models
        for strategy in strategies
        for world in world_sizes
    ]


def measured_points(path: str | Path) -> set[GridPoint]:
    """The grid points ``path`` already holds a record of (for ``--resume``); a torn last record is
    dropped first, with a warning, and what is skipped is said on stderr."""
    keys = resume_keys(path, ("model", "strategy", "world_size", "optimizer"))
    return {(str(m), str(s), int(w), str(o)) for m, s, w, o in keys}


def measure_grid(
    models: Sequence[str],
    strategies: Sequence[str],
    world_sizes: Sequence[int],
    *,
    optimizer: str = "adamw",
    out: str | None = None,
    progress: Callable[[str], None] | None = None,
    skip: Collection[GridPoint] = (),
    quiet: bool = True,
) -> list[dict[str, Any]]:
    """Measure every (model, strategy, world size) not in ``skip``; append each record to ``out``
    (JSONL) as it arrives. A bar on stderr counts the points unless ``quiet`` (or not a terminal)."""
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise TrainsimError(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}")
    todo = [point for point in grid_points(models, strategies, world_sizes, optimizer) if point not in skip]
    records = []
    writer = RecordWriter(out) if out else None
    try:
        with bar(len(todo), "memory truth", quiet=quiet, unit="step") as counter:
            for name, strategy, world, _ in todo:
                counter.set_postfix_str(f"{name} {strategy} W={world}", refresh=True)
                record = measure(MODELS[name], strategy, world, optimizer=optimizer)
                record["provenance"] = provenance({"tool": "calibrate.memory_truth", "process_group": "fake"})
                records.append(record)
                if writer is not None:
                    writer.write(record)
                counter.update(1)
                if progress is not None:
                    progress(
                        f"{name} {strategy} W={world}: peak {record['peak_bytes'] / 1e6:.1f} MB "
                        f"({record['peak_phase']}, {record['tracked_step_s']:.1f} s)"
                    )
    finally:
        if writer is not None:
            writer.close()
    return records


def limit_threads() -> None:
    """At most two torch threads: one tracked step is small, and more threads only add noise."""
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
