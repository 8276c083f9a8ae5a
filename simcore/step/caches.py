"""What evaluating many steps of one sweep can share, as an object the sweep owns.

A sweep evaluates many configurations of few workloads: the same FSDP units, the same run of
identical blocks and its shallower copies (:mod:`simcore.fastpath.fold`), the same long-accumulation
probe for every batch size (:mod:`simcore.fastpath.step`). :class:`StepCaches` keeps those for as
long as whoever runs the sweep keeps it: the what-if makes one per run, the planner one per worker
process, a benchmark one per measurement. It reaches the code that reads it through
:attr:`simcore.strategies.base.StepContext.caches` (copies of a context share it), so nothing is
kept at module level and nothing has to be cleared by hand. A fresh context gets a fresh one.

This module imports nothing of the project: the entries are opaque to it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["PROBE_CACHE_SIZE", "Recent", "StepCaches"]

V = TypeVar("V")

PROBE_CACHE_SIZE = 512  # a kept probe is its communication and memory peaks (a few hundred kilobytes at most)
_DERIVED_SIZE = 64  # runs of blocks, shallower copies: one per workload (and depth) of a sweep
_UNIT_PLANS_SIZE = 32  # FSDP/ZeRO-3 units per (workload, policy): a sweep plans few


class Recent(Generic[V]):
    """At most ``size`` entries; the least recently used one is dropped first.

    :meth:`of` keys an entry by an object's identity (a workload: hashing one per configuration
    costs more than deriving from it) and keeps the object with it, so its id is not reused while
    the entry lives."""

    __slots__ = ("_items", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        """The entry under ``key`` (now the most recent), or None."""
        known = self._items.get(key)
        if known is not None:
            self._items.move_to_end(key)
        return known

    def put(self, key: Hashable, value: V) -> V:
        """Keep ``value`` under ``key`` as the most recent entry; ``value``."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def of(self, owner: object, key: tuple[Hashable, ...], make: Callable[[], V]) -> V:
        """What ``make()`` derives from ``owner`` (and ``key``), made once while it is kept."""
        full = (id(owner), *key)
        known: tuple[object, V] | None = self.get(full)  # type: ignore[assignment]
        if known is not None and known[0] is owner:
            return known[1]
        value = make()
        self.put(full, (owner, value))  # type: ignore[arg-type]
        return value


@dataclass(slots=True, eq=False)
class StepCaches:
    """Derived facts a sweep's step evaluations share (see the module docstring).

    ``probes``: evaluated long-accumulation probes by (reuse key, strategy, contention);
    ``first_probe``: per (strategy, one GPU) the probe size that worked last (0: the plan is not
    built micro-batch by micro-batch); ``runs`` / ``copies``: a workload's longest run of identical
    blocks and its shallower copies by depth; ``unit_plans``: FSDP and ZeRO-3 gather units by
    (workload, policy)."""

    probes: Recent[object] = field(default_factory=lambda: Recent(PROBE_CACHE_SIZE))
    first_probe: dict[tuple[str, bool], int] = field(default_factory=dict)
    runs: Recent[object] = field(default_factory=lambda: Recent(_DERIVED_SIZE))
    copies: Recent[object] = field(default_factory=lambda: Recent(_DERIVED_SIZE))
    unit_plans: Recent[object] = field(default_factory=lambda: Recent(_UNIT_PLANS_SIZE))
