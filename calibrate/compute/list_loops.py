"""Host seconds per rank of the Python loops DeepSpeed 2021's ZeRO-3 runs for every collective.

DeepSpeed v0.3.13-v0.5.4 (``deepspeed/runtime/zero/partition_parameters.py``) builds one list entry
per rank before each parameter tensor's all-gather (``_allgather_param``: a ``narrow`` of the flat
output) and each gradient tensor's reduce-scatter (``_reduce_scatter_gradient``: ``view(-1)`` then
``narrow``), and after every optimizer step it gathers the persistent parameters (those of at most
``param_persistence_threshold`` elements) with ``_allgather_params``, whose loop walks every rank
for every such parameter to copy the rank's part out of the flat result (``view(-1)``, two
``narrow`` and a ``copy_``: the copy is a kernel launch, counted apart). These loops are metadata
work on the host (no kernel), so they time the same on a CPU tensor; :func:`per_rank_loop_s` replays them and returns the least-interfered run's seconds per
rank, the figures of ``simcore/data/efficiency.yaml`` (``deepspeed_zero3.per_rank_lists``).
"""

from __future__ import annotations

import time

__all__ = ["per_rank_loop_s"]


def _gather_loop(flat: object, ranks: int, size: int, rank: int) -> list[object]:
    partitions = []
    for i in range(ranks):
        partitions.append(flat.narrow(0, size * i, size))  # type: ignore[attr-defined]
        if i == rank:
            pass  # DeepSpeed copies its own shard in here: once per collective, not per rank
    return partitions


def _reduce_loop(grad: object, ranks: int, size: int, numel: int) -> list[object]:
    inputs = []
    for i in range(ranks):
        start = i * size
        end = start + size
        if start < numel and end <= numel:
            inputs.append(grad.view(-1).narrow(0, start, size))  # type: ignore[attr-defined]
    return inputs


def _replicate_loop(partitions: list[object], replicated: object, ranks: int, part: int, numel: int) -> int:
    """``_allgather_params``'s per-rank loop for one parameter (v0.3.13-v0.5.5), its ``copy_``
    left out: the views it builds; returns how many it built (the copies it would launch)."""
    views = 0
    param_offset = 0
    for i in range(ranks):
        param_start = i * part
        if param_start < numel:
            numel_to_copy = min(numel - param_start, part)
            part_to_copy = partitions[i].narrow(0, param_offset, numel_to_copy)  # type: ignore[attr-defined]
            target = replicated.view(-1).narrow(0, param_start, numel_to_copy)  # type: ignore[attr-defined]
            views += part_to_copy is not None and target is not None
    return views


def per_rank_loop_s(ranks: int = 1536, calls: int = 20, repeats: int = 7) -> dict[str, float]:
    """``{"all_gather": s, "reduce_scatter": s, "persistent_gather": s}``: CPU seconds per rank of
    each loop, the fastest of ``repeats`` runs of ``calls`` loops over ``ranks`` ranks
    (``time.process_time``)."""
    import torch

    size = 64
    flat = torch.zeros(ranks * size, dtype=torch.float16)
    grad = torch.zeros(ranks, size, dtype=torch.float16)
    parts = _gather_loop(flat, ranks, size, 0)
    replicated = torch.empty(ranks * size, dtype=torch.float16)
    loops = {
        "all_gather": lambda: _gather_loop(flat, ranks, size, 0),
        "reduce_scatter": lambda: _reduce_loop(grad, ranks, size, ranks * size),
        "persistent_gather": lambda: _replicate_loop(parts, replicated, ranks, size, ranks * size),
    }
    result = {}
    with torch.no_grad():
        for name, loop in loops.items():
            runs = []
            for _ in range(repeats):
                start = time.process_time()
                for _ in range(calls):
                    loop()
                runs.append((time.process_time() - start) / (calls * ranks))
            result[name] = min(runs)
    return result
