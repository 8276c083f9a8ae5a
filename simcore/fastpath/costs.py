"""Collective costs for the fast path: closed forms from the one cost model.

The discrete-event path prices a collective by simulating its flows on the cluster
(:func:`simcore.strategies.runner.collective_model`). Where nothing competes the closed form is that
simulation's result (the collectives' plans move equal bytes on every flow of a phase, so max-min
fair sharing drains the most loaded link last: :mod:`simcore.collectives.plan`), so the fast path
asks the same :class:`~simcore.step.cost.CostModel` for the closed form instead. Both read a
calibration profile by the same rule, and both interpolate sizes between powers of two alike.

Costs are kept in the model the functions below return, for as long as it lives: a sweep keeps one
per loaded cluster (:mod:`simcore.planner.evaluate` does, in each worker's caches) and prices each shape once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcore.step.cost import CostModel
from simcore.strategies.base import CollectiveFn, ConcurrentFn
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = ["fast_collective_model", "fast_concurrent_model"]


def fast_collective_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> CollectiveFn:
    """:func:`simcore.strategies.runner.collective_model` from closed forms instead of simulations."""
    return CostModel(topology, calibration, "closed_form", exact).collective_fn()


def fast_concurrent_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> ConcurrentFn:
    """:func:`simcore.strategies.runner.concurrent_model` from the same closed-form cost model."""
    return CostModel(topology, calibration, "closed_form", exact).concurrent_fn()
