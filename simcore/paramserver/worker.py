"""Worker processes: compute a gradient, push it to every shard, pull the parameters back.

Pushes and pulls are flows through the live :class:`simcore.network.Network`, all shards at once,
so W workers pushing to one server show up as incast on the server's links. A worker that hosts a
shard itself (colocated placement) exchanges that shard locally, at no network cost.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simcore.paramserver.modes import MODES, pull_all, ssp_gate, version_check
from simcore.paramserver.server import ShardServer
from simcore.paramserver.state import PSRun

__all__ = ["async_worker", "sync_worker"]


def _push_apply(
    run: PSRun, worker: int, shard: ShardServer, pulled: list[int], staleness: list[int]
) -> Generator[Any, Any, None]:
    yield run.send(run.worker_devices[worker], shard.device, run.grad_bytes[shard.index], "ps_push")
    stale = yield from shard.apply(pulled[shard.index])
    staleness[0] = max(staleness[0], stale)


def async_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-async, ps-ssp and ps-mitigated: loop until the run's gradient budget is spent.

    The worker pushes to every shard at once and pulls every shard as soon as its gradient has been
    applied on all of them (it needs every shard before its next computation anyway).
    """
    rules = MODES[run.config.mode]
    env = run.env
    pulled = [0] * len(run.shards)
    while True:
        if rules.gate:
            yield from ssp_gate(run, worker, pulled)
        if not run.take_ticket():
            run.notify()
            return
        lag = run.clock[worker] - min(run.clock)
        yield env.timeout(run.compute_time(worker))
        if rules.check:
            yield from version_check(run, worker, pulled)
        start = float(env.now)
        staleness = [0]
        yield env.all_of([env.process(_push_apply(run, worker, s, pulled, staleness)) for s in run.shards])
        run.gradient_applied(worker, staleness[0], lag)
        yield from pull_all(run, worker, pulled)
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
        run.take_ticket()
        yield env.timeout(run.compute_time(worker))
        start = float(env.now)
        yield env.all_of([env.process(_sync_shard(run, worker, s, step)) for s in run.shards])
        run.records.comm_s[worker] += float(env.now) - start
        run.gradient_applied(worker, 0, 0)
        run.sync_worker_done(step)
