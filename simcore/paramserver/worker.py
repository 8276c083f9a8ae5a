"""Worker processes: compute a gradient, push it to every shard, pull the parameters back.

Pushes and pulls are flows through the live :class:`simcore.net.network.Network`, all shards at once,
so W workers pushing to one server show up as incast on the server's links. A worker that hosts a
shard itself (colocated placement) exchanges that shard locally, at no network cost.

Each shard is exchanged on its own: a worker pulls a shard as soon as that shard has applied its
gradient (ps-sync: as soon as that shard's round is done), not after the slowest shard, as ps-lite
workers pull each key range when its push is acknowledged. The gradient counts as applied (the
worker's clock advances) when its last shard has been updated.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simcore.paramserver.config import MODES
from simcore.paramserver.modes import pull_shard, ssp_gate, version_check
from simcore.paramserver.server import ShardServer
from simcore.paramserver.state import PSRun

__all__ = ["async_worker", "sync_worker"]


class _Gradient:
    """One gradient in flight on its shards: recorded as applied when its last shard is updated."""

    def __init__(self, run: PSRun, worker: int, lag: int) -> None:
        self.run, self.worker, self.lag = run, worker, lag
        self.pending = len(run.shards)
        self.staleness = 0

    def shard_applied(self, staleness: int) -> None:
        self.staleness = max(self.staleness, staleness)
        self.pending -= 1
        if self.pending == 0:
            self.run.gradient_applied(self.worker, self.staleness, self.lag)


def _exchange(
    run: PSRun, worker: int, shard: ShardServer, pulled: list[int], gradient: _Gradient
) -> Generator[Any, Any, None]:
    """Push the gradient to one shard, wait for the shard to apply it, then pull that shard."""
    yield run.send(run.worker_devices[worker], shard.device, run.grad_bytes[shard.index], "ps_push")
    staleness = yield from shard.apply(pulled[shard.index])
    gradient.shard_applied(staleness)
    yield from pull_shard(run, worker, shard.index, pulled)


def async_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-async, ps-ssp and ps-mitigated: compute and exchange gradients for as long as the run lasts.

    The run ends (the simulation stops) when its budget of ``steps * W`` gradients is applied, with
    every worker still at work: gradients in flight then are not counted.

    The worker pushes to every shard at once and pulls each shard as soon as it has applied the
    gradient; it starts its next computation once every shard is pulled (it needs them all).
    """
    rules = MODES[run.config.mode]
    env = run.env
    pulled = [0] * len(run.shards)
    while True:
        if rules.gate:
            yield from ssp_gate(run, worker, pulled)
        lag = run.clock[worker] - min(run.clock)
        yield env.timeout(run.compute_time(worker))
        if rules.check:
            yield from version_check(run, worker, pulled)
        start = float(env.now)
        gradient = _Gradient(run, worker, lag)
        yield env.all_of([env.process(_exchange(run, worker, s, pulled, gradient)) for s in run.shards])
        run.records.comm_s[worker] += float(env.now) - start


def _sync_shard(run: PSRun, worker: int, shard: ShardServer, step: int) -> Generator[Any, Any, None]:
    device = run.worker_devices[worker]
    yield run.send(device, shard.device, run.grad_bytes[shard.index], "ps_push")
    yield from shard.aggregate(step)
    yield shard.round_done(step)
    yield run.send(shard.device, device, run.param_bytes[shard.index], "ps_pull")


def sync_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-sync: ``steps`` rounds of compute, push, barrier at every shard, pull."""
    env = run.env
    for step in range(run.config.steps):
        yield env.timeout(run.compute_time(worker))
        start = float(env.now)
        yield env.all_of([env.process(_sync_shard(run, worker, s, step)) for s in run.shards])
        run.records.comm_s[worker] += float(env.now) - start
        run.gradient_applied(worker, 0, 0)
        run.sync_worker_done(step)
