"""What composed parallel steps share across configurations: a cache the caller owns.

A sweep (the what-if over layouts, the planner's search) evaluates many configurations of one
workload on a few topologies. Most of a configuration's cost is work that recurs: the gating
device, the compute model, the collective pricer (its memo of priced sizes and contention
factors), a pipeline rank's :class:`~simcore.parallel.stage.StageModel` (sharded layers, their
times, the exposed tensor/context/expert communication) and that stage's data-parallel run, which
with pipelining is one micro-batch's step whatever the global batch. :class:`ComposeCache` keeps
them for as long as its owner keeps it; :func:`~simcore.parallel.step.simulate_parallel_step`
makes a private one per call when given none.

**What it keys on.** Workloads, topologies and calibration profiles by identity: the cache holds a
reference to each object it has seen, so an id in a key cannot be reused by another object while
the cache lives. Everything else (layouts, options, training configurations, strategy names,
seeds, engine paths, layer index tuples) by value; each caller names in its key every input the
cached value depends on (see :mod:`simcore.parallel.step`).

**Why that is safe.** Workloads, configurations, layouts and options are frozen dataclasses, and
topologies and calibration profiles are not changed once loaded; every cached value is a pure
function of its key. A caller that mutates a topology in place must use a fresh cache. Cached
values are shared, never copied: callers treat them as read-only. The tables are bounded
(least recently used entries go first), so a search over thousands of layouts stays in memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

__all__ = ["DEFAULT_MAX_ENTRIES", "ComposeCache"]

T = TypeVar("T")

# Entries per table: a stage's run holds its plan and memory timeline (well under a megabyte for
# a 70B model's stage), so a full table stays within a few hundred megabytes.
DEFAULT_MAX_ENTRIES = 512


class ComposeCache:
    """Values shared by composed steps, by table and key (see the module docstring)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._tables: dict[str, OrderedDict[Hashable, object]] = {}
        self._pinned: dict[int, object] = {}
        self.hits = 0
        self.misses = 0

    def identity(self, obj: object) -> int:
        """A key part standing for ``obj`` itself (its id, valid while the cache holds it)."""
        if obj is None:
            return 0
        self._pinned.setdefault(id(obj), obj)
        return id(obj)

    def get(self, table: str, key: Hashable, build: Callable[[], T]) -> T:
        """The value of ``key`` in ``table``, built by ``build()`` the first time it is asked for."""
        entries = self._tables.setdefault(table, OrderedDict())
        if key in entries:
            self.hits += 1
            entries.move_to_end(key)
            return entries[key]  # type: ignore[return-value]
        self.misses += 1
        value = build()
        entries[key] = value
        if len(entries) > self.max_entries:
            entries.popitem(last=False)
        return value

    def size(self, table: str) -> int:
        """Entries now held in ``table``."""
        return len(self._tables.get(table, ()))
