"""A thin layer over :class:`simpy.Environment`: one seeded RNG per simulation.

Same seed, same results, bit for bit: every random draw comes from :attr:`Simulation.rng`, and
processes are started in a deterministic order (never from dict/set iteration of unordered keys).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import simpy

__all__ = ["Simulation"]


class Simulation:
    """A SimPy environment plus the simulation's random stream."""

    def __init__(self, seed: int = 0) -> None:
        import numpy as np
        import simpy

        self.seed = seed
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(seed)

    @property
    def now(self) -> float:
        return float(self.env.now)

    def run(self, until: float | simpy.Event | None = None) -> None:
        self.env.run(until=until)
