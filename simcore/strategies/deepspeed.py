"""DeepSpeed ZeRO-3's parameter coordinator: its shipped defaults and the prefetch bound they set.

DeepSpeed fetches parameters from module hooks in the traced execution order
(``deepspeed/runtime/zero/partitioned_param_coordinator.py``, ``fetch_sub_module``): it gathers the
current module's parameters, then prefetches the next ones of the trace while the numel it is
prefetching stays below ``min(max_live_parameters - available, prefetch_bucket_size)``, where
``available`` counts the parameters already gathered or in flight. With the prefetch groups of
:func:`simcore.strategies.wrap.bucket_units` (at least a prefetch bucket each) that is one group
ahead while the gathered parameters stay under ``stage3_max_live_parameters`` (1e9 elements by
default), and nothing at all once they reach it: a model whose single modules hold 1e9 elements or
more (a 530 B GPT's 20480 x 81920 MLP matrices, 1.68e9) gathers the module after them on demand,
exposed.

Release and reuse (``release_sub_module``, ``__params_to_release``): after a module runs, its
parameters are released unless one of the modules the trace runs next, walked until
``stage3_max_reuse_distance`` elements of parameters have been passed (1e9), uses them again. With
activation checkpointing a block's backward first recomputes its forward (its modules in forward
order, their hooks fetching and releasing as in forward) and then runs the modules' backward in
reverse order, so a module whose backward lies more than the reuse distance past its recomputation
is gathered twice in backward (:func:`released_after_recompute`).

Per-rank tensor lists (DeepSpeed v0.3.13-v0.5.4, 2021, on torch.distributed's list API; the
``per_rank_lists`` switch): every parameter tensor is gathered by its own ``all_gather`` into a list of
one ``narrow`` view per rank, and every gradient tensor reduce-scattered by its own ``reduce_scatter``
from such a list (``partition_parameters.py`` ``_allgather_param`` / ``_reduce_scatter_gradient``);
ProcessGroupNCCL then copies the flat NCCL buffer out to (or in from) the list, one ``copy_`` per rank
(DeepSpeed PR #1188, which removed it: "the torch.distributed.all_gather will do implicit memcpy at
the end of each ncclAllgather"). The host therefore dispatches operators in proportion to the ranks
for every tensor and every pass (:func:`per_rank_list_host_s`). For an all-gather it does so with
the device idle: before each all-gather DeepSpeed calls ``torch.cuda.synchronize()`` and each fetch
synchronizes again (``_synchronize_communication``; PR #1188: "the async version is not async at
all"), so the queue is empty while the lists are built. A reduce-scatter's lists are built in the
gradient hook (``reduce_partition_and_remove_grads`` on the gradient's AccumulateGrad node), which
autograd runs as soon as it has queued the kernels that make the gradient, and stage3.py's
reduction stream never waits for the compute stream (no ``wait_stream`` in v0.3.13-v0.5.x): that
host work runs beside the unit's backward compute, and only the next fetch's synchronize orders
the reduce-scatter before the next unit. Tensors of at most ``param_persistence_threshold`` elements are never
gathered (they persist), but their gradients are reduce-scattered like the rest
(:func:`gathered_tensor_count`). The same code passes over each full tensor on the device before
its collective: the gathered tensor's buffer is allocated with ``torch.zeros`` (a fill, half a copy of
its bytes) and every gradient is divided by the ranks in place before its reduce-scatter
(``stage3.py`` ``average_tensor``, ``tensor.div_``: one copy), both on the stream the collective
waits for (:func:`list_era_copies`). The gradients take this path with ``contiguous_gradients: true``
(the ZeRO-3 tutorial's config) and ``reduce_scatter: true`` (``stage3.py`` ``average_tensor``); with
v0.3-v0.4's code default ``contiguous_gradients: false`` they are all-reduced in flat buckets
(``buffered_reduce_fallback``), which is not modelled.

The contiguous gradients go through a bucket of ``reduce_bucket_size`` fp16 elements (the "ipg
buffer", 5e8 by default): each gradient that fits is copied in, a larger one is set aside, and a
gradient that would overflow the bucket flushes it first (``reduce_ipg_grads``), as the end of
backward does once more. Each flush divides the *whole* buffer in place, however little of it is
filled (``average_tensor`` on ``[self.ipg_buffer[self.ipg_index]]``): one copy of the bucket's bytes
per flush (:func:`ipg_flushes`), on top of the per-gradient pass above.

After every optimizer step the same code gathers the persistent parameters again
(``stage3.py`` ``_post_step``: ``self.persistent_parameters[0].all_gather(self.persistent_parameters)``,
synchronous, so ``_allgather_params``): one flat all-gather of all of them, then for each parameter a
Python loop over every rank that copies the rank's part out of the flat result, one ``copy_`` per
rank whose part holds elements (:func:`persistent_gather_host_s`). A GPT block has eight such
tensors (two LayerNorms' weight and bias, four biases), so the loop runs ``8 x layers x ranks``
times per step, on the host, before the next step can start.

The defaults live in ``data/efficiency.yaml``, section ``deepspeed_zero3``, with their sources.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simcore.data import data_file
from simcore.workload.types import Layer

__all__ = [
    "PerRankListCost",
    "Zero3Defaults",
    "gathered_tensor_count",
    "ipg_flushes",
    "list_era_copies",
    "per_rank_list_host_s",
    "persistent_gather_host_s",
    "persistent_sizes",
    "prefetch_allowed",
    "released_after_recompute",
    "tensor_sizes",
    "zero3_defaults",
]


@dataclass(frozen=True, slots=True)
class PerRankListCost:
    """Host work per rank of one list collective of the 2021 DeepSpeed: seconds of DeepSpeed's
    Python loop (``loop_s``, measured) and copies ProcessGroupNCCL launches from C++ (``launches``,
    each one kernel launch)."""

    loop_s: float
    launches: int


@dataclass(frozen=True, slots=True)
class Zero3Defaults:
    """DeepSpeed's ZeRO-3 coordinator defaults, in elements (``data/efficiency.yaml``)."""

    prefetch_bucket_size: int
    max_live_parameters: int
    max_reuse_distance: int
    param_persistence_threshold: int
    per_rank_lists: dict[str, PerRankListCost]
    # device passes over the full tensors per collective, in copies of their bytes (list era)
    zero_fill: float
    gradient_divide: float
    # elements of the contiguous-gradient bucket (the ipg buffer) each flush divides whole
    reduce_bucket_size: int


@functools.lru_cache(maxsize=1)
def zero3_defaults() -> Zero3Defaults:
    """The figures of ``data/efficiency.yaml``, section ``deepspeed_zero3``."""
    table = data_file("efficiency.yaml")["deepspeed_zero3"]
    return Zero3Defaults(
        prefetch_bucket_size=int(table["prefetch_bucket_size"]),
        max_live_parameters=int(table["max_live_parameters"]),
        max_reuse_distance=int(table["max_reuse_distance"]),
        param_persistence_threshold=int(table["param_persistence_threshold"]),
        per_rank_lists={
            str(op): PerRankListCost(float(entry["loop_s"]), int(entry["launches"]))
            for op, entry in table["per_rank_lists"].items()
        },
        zero_fill=float(table["list_era_passes"]["zero_fill"]),
        gradient_divide=float(table["list_era_passes"]["gradient_divide"]),
        reduce_bucket_size=int(table["reduce_bucket_size"]),
    )


def tensor_sizes(layer: Layer, tensors: int) -> list[float]:
    """Element counts of ``layer``'s ``tensors`` parameter tensors: a linear layer's weight (the
    ``k x n`` of its GEMM) and its bias (the rest); otherwise ``tensors`` equal parts."""
    if tensors <= 0 or layer.params <= 0:
        return []
    if layer.gemm is not None and tensors == 2 and layer.kind == "linear":
        weight = min(float(layer.params), layer.gemm[1] * layer.gemm[2])
        bias = float(layer.params) - weight
        return [weight, bias] if bias > 0 else [weight]
    return [layer.params / tensors] * tensors


def gathered_tensor_count(layers: Iterable[tuple[Layer, int]], threshold: float) -> int:
    """Tensors of ``(layer, tensors)`` that DeepSpeed gathers: those of more than ``threshold``
    elements (``param_persistence_threshold``: smaller ones persist on every rank)."""
    return sum(size > threshold for layer, tensors in layers for size in tensor_sizes(layer, tensors))


def per_rank_list_host_s(op: str, ranks: int, tensors: int, launch_s: float) -> float:
    """Host seconds of ``tensors`` list collectives ``op`` over ``ranks`` ranks (DeepSpeed 2021):
    ``tensors x ranks x (loop_s + launches x launch_s)``; nothing on one rank."""
    if ranks <= 1 or tensors <= 0:
        return 0.0
    cost = zero3_defaults().per_rank_lists[op]
    return tensors * ranks * (cost.loop_s + cost.launches * launch_s)


def persistent_sizes(layers: Iterable[tuple[Layer, int]], threshold: float) -> list[float]:
    """Element counts of the tensors of ``(layer, tensors)`` that persist on every rank: those of at
    most ``threshold`` elements (``param_persistence_threshold``), the complement of
    :func:`gathered_tensor_count`."""
    return [size for layer, tensors in layers for size in tensor_sizes(layer, tensors) if size <= threshold]


def persistent_gather_host_s(sizes: Iterable[float], ranks: int, launch_s: float) -> float:
    """Host seconds of ``_allgather_params``'s per-rank loop over the persistent tensors of
    ``sizes`` elements after each optimizer step (DeepSpeed 2021) on ``ranks`` ranks: per tensor of
    ``n`` elements, ``ranks x loop_s`` for the loop plus ``launches x launch_s`` for each copy, one
    per rank whose part (``ceil(n / ranks)`` elements, the partition) holds elements, i.e.
    ``ceil(n / part)`` copies; nothing on one rank."""
    if ranks <= 1:
        return 0.0
    cost = zero3_defaults().per_rank_lists["persistent_gather"]
    seconds = 0.0
    for size in sizes:
        if size <= 0:
            continue
        part = math.ceil(size / ranks)
        seconds += ranks * cost.loop_s + math.ceil(size / part) * cost.launches * launch_s
    return seconds


def list_era_copies(op: str, ranks: int) -> float:
    """Copies of a tensor's full bytes that the 2021 DeepSpeed runs on the device before its
    collective ``op`` over ``ranks`` ranks: the gather buffer's zero fill before an all-gather, the
    in-place division of the gradient before a reduce-scatter; none on one rank (nothing is
    gathered or reduced)."""
    if ranks <= 1:
        return 0.0
    defaults = zero3_defaults()
    return {"all_gather": defaults.zero_fill, "reduce_scatter": defaults.gradient_divide}[op]


def ipg_flushes(groups: Sequence[Sequence[float]], bucket: float) -> list[int]:
    """Flushes of DeepSpeed 2021's contiguous-gradient bucket of ``bucket`` elements that each group
    of gradient tensors triggers, the groups and their tensors given in the order backward
    produces them (``stage3.py`` ``reduce_independent_p_g_buckets_and_remove_grads``).

    A gradient flushes the bucket when the elements already in it (a set-aside gradient larger
    than the bucket counts too) plus its own exceed ``bucket``; the end of backward flushes what is
    left once more, counted on the last group. An empty bucket is not flushed (v0.5's guard; before
    it, the code reached that case only by failing on an empty parameter list)."""
    elements = 0.0
    counts = []
    for sizes in groups:
        flushes = 0
        for size in sizes:
            if elements > 0 and elements + size > bucket:
                flushes += 1
                elements = 0.0
            elements += size
        counts.append(flushes)
    if counts and elements > 0:
        counts[-1] += 1
    return counts


def prefetch_allowed(available: Iterable[float], max_live: float) -> bool:
    """Whether DeepSpeed's coordinator prefetches anything with these parameter counts gathered or
    in flight: ``max_live - sum(available) > 0`` (the bound of its prefetch loop)."""
    return max_live - sum(available) > 0


def released_after_recompute(units: Sequence[tuple[int, float]], max_reuse: float) -> list[int]:
    """The gather groups of one checkpointed block (``(group, parameters)`` in forward order) that
    DeepSpeed releases after their recomputation and gathers again for their backward.

    After group ``g``'s recomputed forward the trace runs the block's later groups (forward order)
    and then every group's backward (reverse order); ``g`` is kept when it appears in that sequence
    before ``max_reuse`` parameters have been walked (the coordinator's loop checks the bound before
    each module)."""
    order = list(dict.fromkeys(group for group, _ in units))
    size = dict(units)
    released = []
    for i, group in enumerate(order):
        walked, kept = 0.0, False
        for upcoming in order[i + 1 :] + order[::-1]:
            if walked >= max_reuse:
                break
            if upcoming == group:
                kept = True
                break
            walked += size[upcoming]
        if not kept:
            released.append(group)
    return released
