"""Data-parallel strategies as step plans: a registry keyed by plain names.

Each strategy builds a :class:`~simcore.step.plan.StepPlan` for a representative rank
from a :class:`~simcore.strategies.base.StepContext`; :func:`simcore.strategies.runner.simulate_step`
runs it. The parameter-server modes are not step plans (every worker is its own process): they
live in :mod:`simcore.paramserver`, and :func:`simcore.whatif.sweep.all_strategy_names` lists both.
"""

from __future__ import annotations

from simcore.errors import TrainsimError
from simcore.strategies.base import Strategy, TrainingConfig
from simcore.strategies.ddp import DDPStrategy
from simcore.strategies.fsdp import FSDPStrategy, Zero3Strategy
from simcore.strategies.hsdp import HSDPStrategy
from simcore.strategies.zero import Zero1Strategy, Zero2Strategy

__all__ = ["STRATEGIES", "Strategy", "TrainingConfig", "get_strategy", "strategy_names"]

STRATEGIES: dict[str, Strategy] = {
    "ddp": DDPStrategy(),
    "fsdp": FSDPStrategy(),
    "zero1": Zero1Strategy(),
    "zero2": Zero2Strategy(),
    "zero3": Zero3Strategy(),
    "hsdp": HSDPStrategy(),
}


def strategy_names() -> list[str]:
    """Registered strategy names, in registry order."""
    return list(STRATEGIES)


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; a :class:`TrainsimError` listing the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise TrainsimError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}") from None
