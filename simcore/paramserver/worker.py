"""Worker processes: compute a gradient, push it to every shard, pull the parameters back.

Pushes and pulls are flows through the live :class:`simcore.net.network.Network`, all shards at once,
so W workers pushing to one server show up as incast on the server's links. A worker that hosts a
shard itself (colocated placement) exchanges that shard locally, at no network cost.

Each shard is exchanged on its own: a worker pulls a shard as soon as that shard has applied its
gradient (ps-sync: as soon as that shard's round is done), not after the slowest shard, as ps-lite
workers pull each key range when its push is acknowledged. The gradient counts as applied (the
worker's clock advances) when its last shard has been updated.

With a run's segments (:mod:`simcore.paramserver.pipeline`) ps-sync, ps-async and ps-ssp push each
segment's gradient bytes as soon as backward has produced them and pull each shard's parameters in
the order the next forward needs them; forward waits segment by segment (BytePS / P3).
ps-mitigated keeps the whole-gradient exchange: its version check must see the finished gradient.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simcore.paramserver.config import MODES
from simcore.paramserver.modes import pull_shard, ssp_gate, version_check, wait_for_slowest
from simcore.paramserver.server import ShardServer
from simcore.paramserver.state import PSRun

__all__ = ["async_worker", "pipelined_async_worker", "pipelined_sync_worker", "sync_worker"]


class _Gradient:
    """One gradient in flight on its shards: recorded as applied when its last shard is updated."""

    def __init__(self, run: PSRun, worker: int, lag: int) -> None:
        self.run, self.worker, self.lag = run, worker, lag
        self.pending = len(run.shards)
        self.staleness = 0
        self.applied = run.env.event()  # fires when the last shard has applied it

    def shard_applied(self, staleness: int) -> None:
        self.staleness = max(self.staleness, staleness)
        self.pending -= 1
        if self.pending == 0:
            self.run.gradient_applied(self.worker, self.staleness, self.lag)
            self.applied.succeed()


def _held(run: PSRun, worker: int, gradient: _Gradient) -> bool:
    """ps-ssp: whether the gate will hold this worker, so its pulls wait (see _pull_when_allowed)."""
    if not MODES[run.config.mode].gate:
        return False
    # this worker's clock once the gradient is applied on every shard; the slowest's only grows,
    # so a worker within the bound now will pass the gate and pulls at once, as ps-async does
    clock = run.clock[worker] + (1 if gradient.pending else 0)
    return clock - min(run.clock) > run.config.staleness_bound


def _pull_when_allowed(run: PSRun, worker: int, gradient: _Gradient) -> Generator[Any, Any, None]:
    """ps-ssp: a worker that the gate will hold pulls once it may go on, not now and again then
    (what it would pull now ages while it waits, and SSP's read rule needs the slowest worker's
    next update in it); other modes pull at once."""
    if _held(run, worker, gradient):
        yield gradient.applied
        yield from wait_for_slowest(run, worker)


def _exchange(
    run: PSRun, worker: int, shard: ShardServer, pulled: list[int], gradient: _Gradient
) -> Generator[Any, Any, None]:
    """Push the gradient to one shard, wait for the shard to apply it, then pull that shard.

    A serial server (``PSConfig.serial_replies``) sends the reply from the thread that applied the
    gradient, before it takes the next push; a reply ps-ssp holds is sent when the gate opens,
    from the thread again."""
    yield run.send(run.worker_devices[worker], shard.device, run.grad_bytes[shard.index], "ps_push")
    if not run.config.serial_replies:
        staleness = yield from shard.apply(pulled[shard.index])
        gradient.shard_applied(staleness)
        yield from _pull_when_allowed(run, worker, gradient)
        yield from pull_shard(run, worker, shard.index, pulled)
        return

    def reply_now(staleness: int) -> Any:
        gradient.shard_applied(staleness)
        return None if _held(run, worker, gradient) else _pull(run, worker, shard, pulled)

    def reply_later() -> Any:
        return _pull(run, worker, shard, pulled)

    replied = yield from shard.apply_and_reply(pulled[shard.index], reply_now)
    if not replied:
        yield from _pull_when_allowed(run, worker, gradient)
        yield from shard.reply(reply_later)


def _pull(run: PSRun, worker: int, shard: ShardServer, pulled: list[int]) -> Any:
    """Start the flow of one shard's parameters to ``worker`` (its version as of now)."""
    pulled[shard.index] = shard.version
    return run.send(shard.device, run.worker_devices[worker], run.param_bytes[shard.index], "ps_pull")


def _pipelined_step(
    run: PSRun, worker: int, ready: list[Any], total_s: float
) -> Generator[Any, Any, list[list[Any]]]:
    """Forward segment by segment (each waiting for its parameters), then backward pushing each
    segment's bytes to every shard as it ends; returns the push flows per shard."""
    env, segments = run.env, run.segments
    waited = 0.0
    for k, segment in enumerate(segments):
        if not ready[k].processed:
            start = float(env.now)
            yield ready[k]
            waited += float(env.now) - start
        yield env.timeout(total_s * segment.fwd_fraction)
    run.records.comm_s[worker] += waited
    pushes: list[list[Any]] = [[] for _ in run.shards]
    device = run.worker_devices[worker]
    for k in reversed(range(len(segments))):
        yield env.timeout(total_s * segments[k].bwd_fraction)
        for shard in run.shards:
            share = segments[k].shard_fraction[shard.index]
            if share > 0:
                size = run.grad_bytes[shard.index] * share
                previous = pushes[shard.index][-1] if pushes[shard.index] else None
                pushes[shard.index].append(env.process(_push_after(run, device, shard, size, previous)))
    return pushes


def _push_after(
    run: PSRun, device: str, shard: ShardServer, size: float, previous: Any
) -> Generator[Any, Any, None]:
    """One segment's push on the worker's connection to ``shard``: after the push before it (one
    connection per worker and server carries its messages in order, as in ps-lite)."""
    if previous is not None:
        yield previous
    yield run.send(device, shard.device, size, "ps_push")


def _pull_in_order(
    run: PSRun, worker: int, shard: ShardServer, pulled: list[int], ready: list[list[Any]]
) -> Generator[Any, Any, None]:
    """Pull one shard's parameters segment by segment, first-needed first (P3's priority)."""
    pulled[shard.index] = shard.version
    device = run.worker_devices[worker]
    for k, segment in enumerate(run.segments):
        share = segment.shard_fraction[shard.index]
        if share > 0:
            yield run.send(shard.device, device, run.param_bytes[shard.index] * share, "ps_pull")
        ready[k][shard.index].succeed()


def _ready_events(run: PSRun) -> tuple[list[list[Any]], list[Any]]:
    """Per segment and shard, an event fired when that part is pulled; per segment, all of them."""
    parts = [[run.env.event() for _ in run.shards] for _ in run.segments]
    return parts, [run.env.all_of(per_shard) for per_shard in parts]


def _async_shard(run: PSRun, worker: int, shard: ShardServer, flows: list[Any], pulled: list[int],
                 gradient: _Gradient, parts: list[list[Any]], applied: Any) -> Generator[Any, Any, None]:  # fmt: skip
    if flows:
        yield run.env.all_of(flows)
    staleness = yield from shard.apply(pulled[shard.index])
    gradient.shard_applied(staleness)
    applied.succeed()
    yield from _pull_when_allowed(run, worker, gradient)
    yield from _pull_in_order(run, worker, shard, pulled, parts)


def pipelined_async_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-async and ps-ssp with layer-wise pushes and priority pulls (see the module docstring)."""
    rules = MODES[run.config.mode]
    env = run.env
    pulled = [0] * len(run.shards)
    ready = [env.timeout(0) for _ in run.segments]  # the first step starts from the initial parameters
    applied: list[Any] = []
    while True:
        # the previous gradient applied everywhere (the clock advanced) before the SSP gate looks;
        # only the pulls overlap the next forward
        if applied:
            yield env.all_of(applied)
        if rules.gate:  # its pulls already waited for the slowest (_pull_when_allowed)
            yield from ssp_gate(run, worker)
        lag = run.clock[worker] - min(run.clock)
        pushes = yield from _pipelined_step(run, worker, ready, run.compute_time(worker))
        gradient = _Gradient(run, worker, lag)
        parts, ready = _ready_events(run)
        applied = [env.event() for _ in run.shards]
        for shard in run.shards:
            env.process(
                _async_shard(
                    run, worker, shard, pushes[shard.index], pulled, gradient, parts, applied[shard.index]
                )
            )


def _sync_pipelined_shard(run: PSRun, worker: int, shard: ShardServer, flows: list[Any], step: int,
                          parts: list[list[Any]], pulled: list[int]) -> Generator[Any, Any, None]:  # fmt: skip
    if flows:
        yield run.env.all_of(flows)
    yield from shard.aggregate(step)
    yield shard.round_done(step)
    yield from _pull_in_order(run, worker, shard, pulled, parts)


def pipelined_sync_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-sync with layer-wise pushes and priority pulls: the barrier is each shard's round."""
    env = run.env
    pulled = [0] * len(run.shards)
    ready = [env.timeout(0) for _ in run.segments]
    for step in range(run.config.steps):
        pushes = yield from _pipelined_step(run, worker, ready, run.compute_time(worker))
        parts, ready = _ready_events(run)
        exchanges = [env.process(_sync_pipelined_shard(run, worker, s, pushes[s.index], step, parts, pulled))
                     for s in run.shards]  # fmt: skip
        env.process(_finish_sync_step(run, worker, step, exchanges))
    yield env.all_of(ready)


def _finish_sync_step(run: PSRun, worker: int, step: int, exchanges: list[Any]) -> Generator[Any, Any, None]:
    yield run.env.all_of(exchanges)
    run.gradient_applied(worker, 0, 0)
    run.sync_worker_done(step)


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
        if rules.gate:  # its pulls already waited for the slowest (_pull_when_allowed)
            yield from ssp_gate(run, worker)
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
    if run.config.serial_replies:  # the round's replies one after the other, from the thread

        def reply() -> Any:
            return run.send(shard.device, device, run.param_bytes[shard.index], "ps_pull")

        yield from shard.reply(reply)
        return
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
