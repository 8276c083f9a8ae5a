"""CPU ranks that share a host's cores: how much slower each computes.

A CPU rank is a process whose training thread computes on one core at a time. When more threads are
runnable than there are cores, the kernel's scheduler time-slices them fairly (CFS / EEVDF give each
runnable thread of equal weight an equal share of CPU time, Linux kernel documentation
"CFS Scheduler", sched-design-CFS.rst), so each runs ``busy / cores`` times slower: processor
sharing. A thread that blocks (waiting on a socket, a sleep) takes no share.

Two cases follow:

- **Threads busy together** (every rank of a synchronous step computes at the same time, or a
  parameter server's synchronous round releases all its workers at once): each is slowed by
  ``max(1, busy / cores)`` for the whole computation (:func:`time_sliced_slowdown`).
- **Threads busy independently** (asynchronous workers, which drift apart and compute while others
  push, pull or wait): a thread computing finds each other thread busy with the probability that
  thread spends computing, independently, so it runs ``E[max(1, (1 + N + B) / cores)]`` times
  slower, where ``N`` counts the other threads busy at that moment (a Poisson binomial over their
  busy fractions) and ``B`` is the load of other processes, busy all the time
  (:func:`expected_sharing_slowdown`). The busy fractions depend on the slowdown itself; the caller
  iterates to the fixed point (:func:`shared_core_fixed_point`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "busy_count_distribution",
    "expected_sharing_slowdown",
    "shared_core_fixed_point",
    "time_sliced_slowdown",
]


def time_sliced_slowdown(busy_threads: float, cores: int) -> float:
    """How much slower each of ``busy_threads`` threads busy at once runs on ``cores`` cores."""
    if busy_threads < 1 or cores < 1:
        raise TrainsimError(f"busy threads ({busy_threads}) and cores ({cores}) must be >= 1")
    return max(1.0, busy_threads / cores)


def busy_count_distribution(fractions: Sequence[float]) -> np.ndarray:
    """P(k of the threads are busy), k = 0..len: independent threads, each busy ``fractions[i]``
    of the time (the Poisson binomial distribution, by convolution)."""
    import numpy as np

    distribution = np.array([1.0])
    for p in fractions:
        if not 0.0 <= p <= 1.0:
            raise TrainsimError(f"a busy fraction must be within [0, 1], got {p}")
        distribution = np.convolve(distribution, [1.0 - p, p])
    return distribution


def expected_sharing_slowdown(others_busy: Sequence[float], cores: int, background: float = 0.0) -> float:
    """Mean slowdown of a thread while it computes, beside independent threads each busy
    ``others_busy[i]`` of the time and ``background`` threads of other processes always busy."""
    import numpy as np

    if cores < 1 or background < 0:
        raise TrainsimError(f"cores ({cores}) must be >= 1 and background threads ({background}) >= 0")
    distribution = busy_count_distribution(others_busy)
    busy = 1.0 + background + np.arange(len(distribution))
    return float(np.dot(distribution, np.maximum(1.0, busy / cores)))


def shared_core_fixed_point(
    busy_fractions: Callable[[Sequence[float]], Sequence[float]],
    threads: int,
    cores: int,
    *,
    background: float = 0.0,
    iterations: int = 30,
    tolerance: float = 1e-4,
) -> tuple[float, ...]:
    """Per-thread slowdowns consistent with the busy fractions they cause.

    ``busy_fractions(slowdowns)`` runs the model with thread ``i`` computing ``slowdowns[i]`` times
    slower and returns the fraction of its time each thread computes, then those of any further
    threads whose own speed is not solved for (a parameter server's, say): they only count as
    others. Starts from every thread busy
    at once (the most sharing; busier threads only slow each other more, so the iteration is a
    contraction from above in practice) and damps each update by half.
    """
    import numpy as np

    if threads < 1:
        raise TrainsimError(f"threads ({threads}) must be >= 1")
    slowdowns = np.full(threads, time_sliced_slowdown(threads + background, cores))
    for _ in range(iterations):
        fractions = [min(1.0, max(0.0, float(p))) for p in busy_fractions(tuple(slowdowns))]
        if len(fractions) < threads:
            raise TrainsimError(f"busy_fractions gave {len(fractions)} fractions for {threads} threads")
        target = np.array([
            expected_sharing_slowdown(fractions[:i] + fractions[i + 1 :], cores, background)
            for i in range(threads)
        ])  # fmt: skip
        updated = 0.5 * (slowdowns + target)
        if np.max(np.abs(updated - slowdowns)) < tolerance:
            return tuple(float(s) for s in updated)
        slowdowns = updated
    return tuple(float(s) for s in slowdowns)
