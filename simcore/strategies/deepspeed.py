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
exposed. The defaults live in ``data/efficiency.yaml``, section ``deepspeed_zero3``, with their
sources.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from simcore.data import data_file

__all__ = ["Zero3Defaults", "prefetch_allowed", "zero3_defaults"]


@dataclass(frozen=True, slots=True)
class Zero3Defaults:
    """DeepSpeed's ZeRO-3 coordinator defaults, in elements (``data/efficiency.yaml``)."""

    prefetch_bucket_size: int
    max_live_parameters: int
    param_persistence_threshold: int


@functools.lru_cache(maxsize=1)
def zero3_defaults() -> Zero3Defaults:
    """The figures of ``data/efficiency.yaml``, section ``deepspeed_zero3``."""
    table = data_file("efficiency.yaml")["deepspeed_zero3"]
    return Zero3Defaults(
        prefetch_bucket_size=int(table["prefetch_bucket_size"]),
        max_live_parameters=int(table["max_live_parameters"]),
        param_persistence_threshold=int(table["param_persistence_threshold"]),
    )


def prefetch_allowed(available: Iterable[float], max_live: float) -> bool:
    """Whether DeepSpeed's coordinator prefetches anything with these parameter counts gathered or
    in flight: ``max_live - sum(available) > 0`` (the bound of its prefetch loop)."""
    return max_live - sum(available) > 0
