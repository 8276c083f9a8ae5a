"""The live state of one parameter-server simulation and what it records as it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import Heterogeneity
from simcore.engine import Simulation
from simcore.net.network import Network
from simcore.paramserver.config import PSConfig
from simcore.paramserver.pipeline import Segment
from simcore.paramserver.server import ShardServer

# numpy, simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    import simpy

__all__ = ["PSRun", "Records"]


@dataclass(slots=True)
class Records:
    """Per gradient and per worker observations (times in simulated seconds)."""

    staleness: list[int] = field(default_factory=list)  # per applied gradient: max over its shards
    clock_lag: list[int] = field(default_factory=list)  # per gradient: worker clock - slowest clock at start
    applied_s: list[float] = field(default_factory=list)  # when each gradient's last shard was updated
    step_end_s: list[float] = field(default_factory=list)  # ps-sync: when every worker had pulled step i
    blocking_s: list[float] = field(default_factory=list)  # per worker: SSP gate waits
    check_s: list[float] = field(default_factory=list)  # per worker: version checks, re-pulls, recomputes
    comm_s: list[float] = field(default_factory=list)  # per worker: time with its pushes/pulls in flight
    recomputes: list[int] = field(default_factory=list)
    gradients: list[int] = field(default_factory=list)


class PSRun:
    """Everything the worker processes share: network, shards, clocks, the gradient budget, records."""

    def __init__(
        self,
        sim: Simulation,
        network: Network,
        config: PSConfig,
        shards: Sequence[ShardServer],
        worker_devices: Sequence[str],
        compute_s: Sequence[float] | np.ndarray,
        heterogeneity: Heterogeneity,
        *,
        grad_bytes: Sequence[float],
        param_bytes: Sequence[float],
        segments: Sequence[Segment] = (),
    ) -> None:
        import numpy as np

        self.sim = sim
        self.env: simpy.Environment = sim.env
        self.network = network
        self.config = config
        self.shards = list(shards)
        self.worker_devices = list(worker_devices)
        self.workers = len(worker_devices)
        self.base_compute_s = np.asarray(compute_s, dtype=float) * heterogeneity.straggler_factors(
            self.workers
        )
        self.heterogeneity = heterogeneity
        self.grad_bytes = list(grad_bytes)
        self.param_bytes = list(param_bytes)
        self.segments = tuple(segments)  # layer-wise pushes and priority pulls (pipeline.py); () = off
        self.clock = [0] * self.workers
        self.budget = config.steps * self.workers  # gradients to apply
        self.finished = self.env.event()  # fires when the budget's last gradient is applied
        self.records = Records(
            blocking_s=[0.0] * self.workers,
            check_s=[0.0] * self.workers,
            comm_s=[0.0] * self.workers,
            recomputes=[0] * self.workers,
            gradients=[0] * self.workers,
        )
        self._changed = self.env.event()
        self._sync_done: dict[int, int] = {}

    # --- costs ---------------------------------------------------------------------------------
    def compute_time(self, worker: int) -> float:
        """One gradient on ``worker``: its device and straggler factor times a fresh jitter draw."""
        jitter = self.heterogeneity.jitter.compute
        factor = float(jitter.draw(self.sim.rng, 1)[0]) if jitter.active else 1.0
        return float(self.base_compute_s[worker]) * factor

    def send(self, src: str, dst: str, size_bytes: float, tag: str) -> simpy.Event:
        """A flow through the live network (bytes scaled by a link-jitter draw)."""
        jitter = self.heterogeneity.jitter.link
        if jitter.active and src != dst and size_bytes > 0:
            size_bytes *= float(jitter.draw(self.sim.rng, 1)[0])
        return self.network.transfer(src, dst, size_bytes, tag=tag)

    def message(self, src: str, dst: str, size_bytes: float) -> simpy.Event:
        """A small control message: route latency plus its bytes at the route's narrowest bandwidth.

        Not a flow: a few dozen bytes take a negligible share of any link, so it neither slows the
        bulk transfers nor is slowed by them (and costs no rate recomputation).
        """
        if src == dst:
            return self.env.timeout(0.0)
        route = self.network.route(src, dst)
        delay = self.network.route_latency(route) + size_bytes / self.network.route_bandwidth(route)
        return self.env.timeout(delay)

    # --- budget and clocks ---------------------------------------------------------------------
    @property
    def budget_spent(self) -> bool:
        """Whether ``steps * workers`` gradients have been applied (the run is over)."""
        return len(self.records.applied_s) >= self.budget

    def changed(self) -> simpy.Event:
        """Fires at the next clock advance."""
        return self._changed

    def notify(self) -> None:
        old, self._changed = self._changed, self.env.event()
        old.succeed()

    def gradient_applied(self, worker: int, staleness: int, lag: int) -> None:
        """Record one applied gradient; the budget's last one ends the run (later ones are not kept)."""
        if self.budget_spent:
            return
        rec = self.records
        rec.staleness.append(staleness)
        rec.clock_lag.append(lag)
        rec.applied_s.append(float(self.env.now))
        rec.gradients[worker] += 1
        self.clock[worker] += 1
        self.notify()
        if self.budget_spent:
            self.finished.succeed()

    def sync_worker_done(self, step: int) -> None:
        done = self._sync_done.get(step, 0) + 1
        self._sync_done[step] = done
        if done == self.workers:
            self.records.step_end_s.append(float(self.env.now))
