"""The one collective cost model: a topology, an optional calibration profile, a mode, its own memo.

Every front end that prices a collective for a step goes through :class:`CostModel`: the
discrete-event path (:func:`simcore.strategies.runner.collective_model` and ``concurrent_model``),
the event-free fast path (:func:`simcore.fastpath.costs.fast_collective_model` and
``fast_concurrent_model``) and the parallel layouts (:class:`simcore.parallel.comm.GroupPricer`).
They differ only in the mode:

- ``"flow"``: the collective's flows simulated on the cluster
  (:func:`simcore.collectives.collective_time`), as the discrete-event path has always priced;
- ``"closed_form"``: the same plan's closed form (:func:`simcore.collectives.price`). The plans
  move equal bytes on every flow of a phase, so max-min fair sharing drains the most loaded link
  last and the closed form is the simulation's result (:mod:`simcore.collectives.plan`).

Where the calibration profile has a fit for the request's (operation, ranks, scope), the fit
answers instead, by the one rule of :mod:`simcore.calibration.collective_cost` (the fastest measured protocol),
in both modes and also for same-shape groups running at once (the first group's shape: the fit was
measured on one communicator). Otherwise groups running one collective at once are priced together
by :func:`simcore.collectives.concurrent_collective_time`, itself a closed form over the links the
groups share.

Sizes of 1 KiB and up are priced at the two powers of two around them and interpolated linearly
(:func:`priced_between_powers_of_two`) unless ``exact``. Costs are kept in
the model's own :class:`CostMemo`, for as long as the model lives: whoever runs a sweep keeps one
model per loaded cluster (the planner does, per process) and so prices each shape once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simcore.calibration.collective_cost import calibrated_cost
from simcore.collectives import LinkRef, collective_time, concurrent_collective_time, describe_link, price
from simcore.errors import TrainsimError
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = [
    "COST_MODES",
    "CollectiveFn",
    "CollectiveRequest",
    "CommCost",
    "ConcurrentFn",
    "CostMemo",
    "CostModel",
    "priced_between_powers_of_two",
]


@dataclass(frozen=True, slots=True)
class CommCost:
    """The uncontended time of one collective and the link that limits it."""

    time_s: float
    bottleneck_link: str = ""
    link_kind: str = ""


CollectiveFn = Callable[[str, float, tuple[int, ...]], CommCost]
# prices one collective run by several same-shape groups at once (each group's time)
ConcurrentFn = Callable[[str, float, tuple[tuple[int, ...], ...]], CommCost]


def priced_between_powers_of_two(
    point: Callable[[str, float, Any], CommCost], exact: bool
) -> Callable[[str, float, Any], CommCost]:
    """``point`` for sizes of 1 KiB and up priced by linear interpolation between the two powers of
    two around them (so a sweep prices few distinct sizes); ``exact`` prices every size itself. The
    discrete-event and the event-free paths both price through this, so they agree."""

    def priced(op: str, size_bytes: float, group: Any) -> CommCost:
        if exact or size_bytes < 1024:
            return point(op, size_bytes, group)
        low = float(2 ** math.floor(math.log2(size_bytes)))
        if low == size_bytes:
            return point(op, size_bytes, group)
        below, above = point(op, low, group), point(op, 2 * low, group)
        share = (size_bytes - low) / low
        time_s = below.time_s + share * (above.time_s - below.time_s)
        nearer = above if share >= 0.5 else below
        return CommCost(time_s, nearer.bottleneck_link, nearer.link_kind)

    return priced


COST_MODES = ("closed_form", "flow")
Group = tuple[int, ...]
_IDENTITY_LIMIT = 4096  # groups one front end recognises by identity before it starts afresh


@dataclass(frozen=True, slots=True)
class CollectiveRequest:
    """One collective to price: ``op`` of ``size_bytes`` (nccl-tests' size) over ``group``, while
    each of ``siblings`` (groups of the same size) runs the same collective at the same moment."""

    op: str
    size_bytes: float
    group: Group
    siblings: tuple[Group, ...] = ()

    @property
    def groups(self) -> tuple[Group, ...]:
        """Every group running the collective at once, ``group`` first."""
        return (self.group, *self.siblings)


@dataclass(slots=True)
class CostMemo:
    """A model's priced points: (op, size, group) alone, (op, size, groups) together."""

    alone: dict[tuple[str, float, Group], CommCost] = field(default_factory=dict)
    together: dict[tuple[str, float, tuple[Group, ...]], CommCost] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.alone) + len(self.together)

    def clear(self) -> None:
        """Forget every priced point (benchmarks time cold models with it)."""
        self.alone.clear()
        self.together.clear()


def _link_cost(time_s: float, link: LinkRef | None) -> CommCost:
    return CommCost(float(time_s), describe_link(link), link.kind if link is not None else "")


@dataclass(frozen=True, slots=True, eq=False)
class CostModel:
    """Collective costs on ``topology`` (see the module docstring); ``calibration``'s fits answer
    where it has them. ``mode`` is one of :data:`COST_MODES`; ``exact`` prices every size itself
    instead of interpolating between powers of two."""

    topology: Topology
    calibration: CalibrationProfile | None = None
    mode: str = "closed_form"
    exact: bool = False
    memo: CostMemo = field(default_factory=CostMemo, repr=False)
    _alone_at: Callable[[str, float, Group], CommCost] = field(init=False, repr=False)
    _together_at: Callable[[str, float, tuple[Group, ...]], CommCost] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in COST_MODES:
            raise TrainsimError(f"unknown cost mode {self.mode!r}; allowed: {', '.join(COST_MODES)}")
        # built once: every size of 1 KiB and up is priced at the powers of two around it
        object.__setattr__(self, "_alone_at", priced_between_powers_of_two(self._alone, self.exact))
        object.__setattr__(self, "_together_at", priced_between_powers_of_two(self._together, self.exact))

    def price(self, request: CollectiveRequest) -> CommCost:
        """What ``request.group`` takes: alone, or together with its siblings when it has any."""
        if request.siblings:
            return self._together_at(request.op, request.size_bytes, request.groups)
        return self._alone_at(request.op, request.size_bytes, request.group)

    def price_concurrent(self, request: CollectiveRequest) -> CommCost:
        """What each of ``request.groups`` (same size) takes when all run the collective at once."""
        return self._together_at(request.op, request.size_bytes, request.groups)

    def collective_fn(self) -> CollectiveFn:
        """:meth:`price` as the ``(op, size_bytes, group)`` function a step context calls."""
        return _by_identity(self._alone_at)

    def concurrent_fn(self) -> ConcurrentFn:
        """:meth:`price_concurrent` as the ``(op, size_bytes, groups)`` function a step context calls."""
        return _by_identity(self._together_at)

    def _alone(self, op: str, size_bytes: float, group: Group) -> CommCost:
        key = (op, size_bytes, group)
        cost = self.memo.alone.get(key)
        if cost is None:
            cost = self.memo.alone[key] = self._price_alone(op, size_bytes, group)
        return cost

    def _together(self, op: str, size_bytes: float, groups: tuple[Group, ...]) -> CommCost:
        key = (op, size_bytes, groups)
        cost = self.memo.together.get(key)
        if cost is None:
            cost = self.memo.together[key] = self._price_together(op, size_bytes, groups)
        return cost

    def _price_alone(self, op: str, size_bytes: float, group: Group) -> CommCost:
        priced = price(self.topology, op, size_bytes, group)  # checks the request, cached per topology
        measured = self._measured(op, priced.size_bytes, priced.group)
        if measured is not None:
            return measured
        if self.mode == "closed_form":
            return _link_cost(priced.closed_form_s, priced.bottleneck)
        result = collective_time(self.topology, op, size_bytes, group)
        return _link_cost(result.time_s, result.bottleneck)

    def _price_together(self, op: str, size_bytes: float, groups: tuple[Group, ...]) -> CommCost:
        if self.calibration is not None:
            priced = price(self.topology, op, size_bytes, groups[0])
            measured = self._measured(op, priced.size_bytes, priced.group)
            if measured is not None:
                return measured
        result = concurrent_collective_time(self.topology, op, size_bytes, groups)
        return _link_cost(result.time_s, result.bottleneck)

    def _measured(self, op: str, size_bytes: float, group: Group) -> CommCost | None:
        """The calibration profile's answer for the shape (the only place a model reads the profile)."""
        if self.calibration is None:
            return None
        fitted = calibrated_cost(self.topology, op, size_bytes, group, self.calibration)
        return None if fitted is None else CommCost(fitted.time_s, fitted.label, "")


def _by_identity(priced: Callable[[str, float, Any], CommCost]) -> Callable[[str, float, Any], CommCost]:
    """Groups recognised by identity first (a step context hands the same tuples over and over), so
    pricing a collective seen before costs one dictionary lookup, not a hash of every rank."""
    seen: dict[tuple[str, float, int], tuple[object, CommCost]] = {}

    def priced_by_identity(op: str, size_bytes: float, group: Any) -> CommCost:
        key = (op, size_bytes, id(group))
        known = seen.get(key)
        if known is not None and known[0] is group:
            return known[1]
        if len(seen) >= _IDENTITY_LIMIT:  # contexts come and go in a sweep: forget their groups
            seen.clear()
        cost = priced(op, size_bytes, group)
        seen[key] = (group, cost)
        return cost

    return priced_by_identity
