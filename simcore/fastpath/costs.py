"""Collective costs for the fast path: closed forms, cached per shape across a whole sweep.

The discrete-event path prices a collective by simulating its flows on the cluster once per
topology object (:func:`simcore.strategies.runner.collective_model`). Where nothing competes the
closed form is that simulation's result (the collectives' plans move equal bytes on every flow of
a phase, so max-min fair sharing drains the most loaded link last: :mod:`simcore.collectives.plan`),
so the fast path asks for the closed form instead and keeps it for the rest of the process, keyed
by (topology fingerprint, operation, bytes, group): a sweep that loads the same cluster again, or
the same cluster at many micro-batch sizes and strategies, prices each shape once.

Sizes are priced exactly as the discrete-event path prices them: at the two powers of two around
the size, interpolated linearly (:func:`simcore.strategies.runner.collective_model`). Same-shape
groups running one collective at once (HSDP's replicate groups) are priced together by
:func:`simcore.collectives.concurrent_collective_time`, itself a closed form over the links the
groups share, as :func:`simcore.strategies.runner.concurrent_model` prices them.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simcore.collectives import busbw_factor, concurrent_collective_time
from simcore.collectives.api import price
from simcore.collectives.plan import rank_hosts
from simcore.collectives.result import describe_link
from simcore.strategies.base import CollectiveFn, CommCost, ConcurrentFn, priced_between_powers_of_two
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = [
    "clear_cost_cache",
    "closed_form_cost",
    "concurrent_closed_form_cost",
    "cost_cache_size",
    "fast_collective_model",
    "fast_concurrent_model",
    "topology_key",
]

_TopologyKey = tuple[str, int, str]
_FINGERPRINTS: weakref.WeakKeyDictionary[Topology, _TopologyKey] = weakref.WeakKeyDictionary()
# (topology key, calibration id, op, size, group) -> cost; sized by the shapes a sweep meets (a few
# hundred), so it is kept for the life of the process.
_COSTS: dict[tuple[object, ...], CommCost] = {}
_MEMO_LIMIT = 4096  # entries of one model's identity memo before it starts afresh
# Calibration profiles seen, kept alive so the id in a cache key is never reused by another one.
_PROFILES: dict[int, CalibrationProfile] = {}


def topology_key(topology: Topology) -> _TopologyKey:
    """What a collective's cost depends on: the name, ranks and every link (hashed once per object)."""
    key = _FINGERPRINTS.get(topology)
    if key is None:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(repr(topology.ranks).encode())
        for u, v, attrs in topology.graph.edges(data=True):
            digest.update(f"{u}>{v}:{attrs['bandwidth_Bps']!r}:{attrs['latency_s']!r};".encode())
        key = _FINGERPRINTS[topology] = (topology.name, topology.world_size, digest.hexdigest())
    return key


def clear_cost_cache() -> None:
    """Forget every cached collective cost (benchmarks time cold caches with it)."""
    _COSTS.clear()
    _PROFILES.clear()


def cost_cache_size() -> int:
    return len(_COSTS)


def _calibrated(
    topology: Topology, op: str, size: float, group: tuple[int, ...], calibration: CalibrationProfile
) -> CommCost | None:
    """A profile's fitted alpha-beta for (op, ranks, scope), as :func:`collective_time` uses it."""
    scope = "intra_node" if len(set(rank_hosts(topology, group))) == 1 else "inter_node"
    fit = calibration.collective_alpha_beta(op, len(group), scope)
    if fit is None:
        return None
    alpha_s, busbw_Bps = fit
    return CommCost(alpha_s + busbw_factor(op, len(group)) * size / busbw_Bps, f"calibrated ({scope})", "")


def closed_form_cost(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: tuple[int, ...],
    calibration: CalibrationProfile | None = None,
) -> CommCost:
    """The uncontended cost of one collective (the automatically chosen algorithm), cached per shape."""
    if calibration is not None:
        _PROFILES.setdefault(id(calibration), calibration)
    key = (topology_key(topology), id(calibration) if calibration else 0, op, size_bytes, group)
    cost = _COSTS.get(key)
    if cost is not None:
        return cost
    priced = price(topology, op, size_bytes, group)
    cost = _calibrated(topology, op, priced.size_bytes, priced.group, calibration) if calibration else None
    if cost is None:
        link = priced.bottleneck
        cost = CommCost(float(priced.closed_form_s), describe_link(link), link.kind if link else "")
    _COSTS[key] = cost
    return cost


def concurrent_closed_form_cost(
    topology: Topology,
    op: str,
    size_bytes: float,
    groups: tuple[tuple[int, ...], ...],
    calibration: CalibrationProfile | None = None,
) -> CommCost:
    """What each of ``groups`` takes when all run one collective at once, cached per shape; a
    calibration profile's fit for the first group's shape answers instead (as in the DES path)."""
    if calibration is not None:
        _PROFILES.setdefault(id(calibration), calibration)
    key = (
        topology_key(topology),
        id(calibration) if calibration else 0,
        "concurrent",
        op,
        size_bytes,
        groups,
    )
    cost = _COSTS.get(key)
    if cost is not None:
        return cost
    cost = None
    if calibration is not None:
        priced = price(topology, op, size_bytes, groups[0])
        cost = _calibrated(topology, op, priced.size_bytes, priced.group, calibration)
    if cost is None:
        result = concurrent_collective_time(topology, op, size_bytes, groups)
        link = result.bottleneck
        cost = CommCost(float(result.time_s), describe_link(link), link.kind if link else "")
    _COSTS[key] = cost
    return cost


def _by_identity(priced: Callable[[str, float, Any], CommCost]) -> Callable[[str, float, Any], CommCost]:
    """Groups recognised by identity first (a step context hands the same tuples over and over),
    so pricing a collective seen before costs one dictionary lookup, not a hash of every rank."""
    memo: dict[tuple[str, float, int], tuple[object, CommCost]] = {}

    def price(op: str, size_bytes: float, group: Any) -> CommCost:
        key = (op, size_bytes, id(group))
        known = memo.get(key)
        if known is not None and known[0] is group:
            return known[1]
        if len(memo) >= _MEMO_LIMIT:  # contexts come and go in a sweep: forget their groups
            memo.clear()
        cost = priced(op, size_bytes, group)
        memo[key] = (group, cost)
        return cost

    return price


def fast_collective_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> CollectiveFn:
    """:func:`simcore.strategies.runner.collective_model` from closed forms instead of simulations."""

    def point(op: str, size_bytes: float, group: tuple[int, ...]) -> CommCost:
        return closed_form_cost(topology, op, size_bytes, group, calibration)

    return _by_identity(priced_between_powers_of_two(point, exact))


def fast_concurrent_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> ConcurrentFn:
    """:func:`simcore.strategies.runner.concurrent_model`, cached per shape for the whole process."""

    def point(op: str, size_bytes: float, groups: tuple[tuple[int, ...], ...]) -> CommCost:
        return concurrent_closed_form_cost(topology, op, size_bytes, groups, calibration)

    return _by_identity(priced_between_powers_of_two(point, exact))
