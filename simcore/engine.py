"""A thin layer over :class:`simpy.Environment`: one seeded RNG per simulation.

Same seed, same results, bit for bit: every random draw comes from :attr:`Simulation.rng`, and
processes are started in a deterministic order (never from dict/set iteration of unordered keys).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# numpy, simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    import simpy

__all__ = ["Simulation"]


class Simulation:
    """A SimPy environment plus the simulation's random stream."""

    def __init__(self, seed: int = 0) -> None:
        import simpy

        self.seed = seed
        self.env = simpy.Environment()
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The simulation's random stream, ``default_rng(seed)``, made at the first draw: a run
        without jitter draws nothing, and importing numpy.random costs about 10 ms of CPU."""
        if self._rng is None:
            import numpy as np

            self._rng = np.random.default_rng(self.seed)
        return self._rng

    @property
    def now(self) -> float:
        return float(self.env.now)

    def run(self, until: float | simpy.Event | None = None) -> None:
        self.env.run(until=until)
