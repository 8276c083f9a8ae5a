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

The defaults live in ``data/efficiency.yaml``, section ``deepspeed_zero3``, with their sources.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simcore.data import data_file

__all__ = ["Zero3Defaults", "prefetch_allowed", "released_after_recompute", "zero3_defaults"]


@dataclass(frozen=True, slots=True)
class Zero3Defaults:
    """DeepSpeed's ZeRO-3 coordinator defaults, in elements (``data/efficiency.yaml``)."""

    prefetch_bucket_size: int
    max_live_parameters: int
    max_reuse_distance: int
    param_persistence_threshold: int


@functools.lru_cache(maxsize=1)
def zero3_defaults() -> Zero3Defaults:
    """The figures of ``data/efficiency.yaml``, section ``deepspeed_zero3``."""
    table = data_file("efficiency.yaml")["deepspeed_zero3"]
    return Zero3Defaults(
        prefetch_bucket_size=int(table["prefetch_bucket_size"]),
        max_live_parameters=int(table["max_live_parameters"]),
        max_reuse_distance=int(table["max_reuse_distance"]),
        param_persistence_threshold=int(table["param_persistence_threshold"]),
    )


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
