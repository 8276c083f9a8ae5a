"""Worker processes: compute a gradient, push it to every shard, pull the parameters back.

Pushes and pulls are flows through the live :class:`simcore.net.network.Network`, all shards at once,
so W workers pushing to one server show up as incast on the server's links. A worker that hosts a
shard itself (colocated placement) exchanges that shard locally, at no network cost.

Each shard is exchanged on its own: a worker pulls a shard as soon as that shard has applied its
gradient (ps-sync: as soon as that shard's round is done), not after the slowest shard, as ps-lite
workers pull each key range when its push is acknowledged. The gradient counts as applied (the
worker's clock advances) when its last shard has been updated.

With a run's segments (:mod:`simcore.paramserver.pipeline`) ps-sync, ps-async and ps-ssp push each
segment's gradient bytes as soon as backward has produced them; each segment's part of a shard is
applied when it arrives (ps-sync: a round of its own, summed over the workers' parts and updated
when the last arrives) and pulled back at once, behind the worker's earlier pulls from that shard;
forward waits segment by segment for its parts. That is MXNet's per-key schedule (apache/mxnet
de25459, 2015-12): ``model.py`` ``_update_params_on_kvstore`` pushes and pulls every key, and the
dependency engine runs each push once backward has written that key's gradient;
``src/kvstore/kvstore_dist.h`` ``Pull`` reuses the key's merge buffer "so that all pushes and pulls
on the same key on the local machine are always sequential" (a key's pull waits for its push to be
acknowledged, not for other keys); ``kvstore_dist_server.h`` ``DataHandle`` takes one key a request,
updates it on arrival (dist_async) or once every worker has pushed it (dist_sync), and answers.
ps-mitigated keeps the whole-gradient exchange: its version check must see the finished gradient.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

from simcore.paramserver.config import MODES
from simcore.paramserver.modes import pull_shard, ssp_gate, version_check, wait_for_slowest
from simcore.paramserver.server import ShardServer
from simcore.paramserver.sockets import held_bytes
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

    delivered = run.env.event()

    def reply_now(staleness: int) -> Any:
        gradient.shard_applied(staleness)
        return None if _held(run, worker, gradient) else _reply(run, worker, shard, pulled, delivered)

    def reply_later() -> Any:
        return _reply(run, worker, shard, pulled, delivered)

    replied = yield from shard.apply_and_reply(pulled[shard.index], reply_now)
    if not replied:
        yield from _pull_when_allowed(run, worker, gradient)
        yield from shard.reply(reply_later)
    yield delivered


def _reply(run: PSRun, worker: int, shard: ShardServer, pulled: list[int], delivered: Any) -> Any:
    """A serial server's reply of one shard's parameters to ``worker`` (its version as of now):
    returns the event that frees the server's thread, ``delivered`` fires when the worker has it."""
    pulled[shard.index] = shard.version
    released = run.env.event()
    run.env.process(_blocking_send(run, shard.device, run.worker_devices[worker], run.param_bytes[shard.index],
                                   released, delivered))  # fmt: skip
    return released


def _blocking_send(run: PSRun, src: str, dst: str, size: float, released: Any, delivered: Any) -> Generator[Any, Any, None]:  # fmt: skip
    """A blocking send: ``released`` when the bytes beyond the socket's send buffer have left
    (:mod:`simcore.paramserver.sockets`), ``delivered`` when the rest has drained too."""
    held = held_bytes(size)
    if held > 0:
        yield run.send(src, dst, held, "ps_pull")
    released.succeed()
    if size - held > 0:
        yield run.send(src, dst, size - held, "ps_pull")
    delivered.succeed()


class _Part(NamedTuple):
    """One segment's gradient bytes of one shard: ``pushed`` fires when they have arrived."""

    segment: int
    pushed: Any


def _new_parts(run: PSRun) -> list[list[_Part]]:
    """Each shard's parts of the coming gradient, in the order backward pushes them (last segment
    first), made before the step so that the shards take each part as it arrives."""
    count = len(run.segments)
    return [
        [
            _Part(k, run.env.event())
            for k in reversed(range(count))
            if run.segments[k].shard_fraction[shard.index] > 0
        ]
        for shard in run.shards
    ]


def _pipelined_step(
    run: PSRun, worker: int, ready: list[Any], total_s: float, parts: list[list[_Part]]
) -> Generator[Any, Any, None]:
    """Forward segment by segment (each waiting for its parameters), then backward pushing each
    segment's bytes to every shard as it ends (firing ``parts``' events as they arrive)."""
    env, segments = run.env, run.segments
    waited = 0.0
    for k, segment in enumerate(segments):
        if not ready[k].processed:
            start = float(env.now)
            yield ready[k]
            waited += float(env.now) - start
        yield env.timeout(total_s * segment.fwd_fraction)
    run.records.comm_s[worker] += waited
    device = run.worker_devices[worker]
    sent = [0] * len(run.shards)  # parts of each shard pushed so far
    for k in reversed(range(len(segments))):
        yield env.timeout(total_s * segments[k].bwd_fraction)
        for shard in run.shards:
            share = segments[k].shard_fraction[shard.index]
            if share > 0:
                mine = parts[shard.index]
                previous = mine[sent[shard.index] - 1].pushed if sent[shard.index] else None
                part = mine[sent[shard.index]]
                sent[shard.index] += 1
                size = run.grad_bytes[shard.index] * share
                env.process(_push_after(run, device, shard, size, previous, part.pushed))


def _push_after(
    run: PSRun, device: str, shard: ShardServer, size: float, previous: Any, pushed: Any
) -> Generator[Any, Any, None]:
    """One segment's push on the worker's connection to ``shard``: after the push before it (one
    connection per worker and server carries its messages in order, as in ps-lite)."""
    if previous is not None:
        yield previous
    yield run.send(device, shard.device, size, "ps_push")
    pushed.succeed()


def _pull_part(run: PSRun, worker: int, shard: ShardServer, segment: int, previous: Any, ready: Any,
               pulled: list[int], last: bool, gradient: _Gradient | None) -> Generator[Any, Any, None]:  # fmt: skip
    """Pull one segment's part of a shard once its update is applied, after the part before it
    (the server's replies to one worker arrive in order); ``last``: the part that completes the
    gradient, whose version the worker now holds."""
    if previous is not None:
        yield previous
    if gradient is not None:
        yield from _pull_when_allowed(run, worker, gradient)
    if last:
        pulled[shard.index] = shard.version
    share = run.segments[segment].shard_fraction[shard.index]
    yield run.send(shard.device, run.worker_devices[worker], run.param_bytes[shard.index] * share, "ps_pull")
    ready.succeed()


def _ready_events(run: PSRun) -> tuple[list[list[Any]], list[Any]]:
    """Per segment and shard, an event fired when that part is pulled; per segment, all of them."""
    parts = [[run.env.event() for _ in run.shards] for _ in run.segments]
    return parts, [run.env.all_of(per_shard) for per_shard in parts]


def _nothing_to_pull(run: PSRun, shard: ShardServer, ready: list[list[Any]]) -> None:
    """The segments that hold none of ``shard``'s parameters need nothing from it."""
    for k, segment in enumerate(run.segments):
        if segment.shard_fraction[shard.index] <= 0:
            ready[k][shard.index].succeed()


def _async_shard(run: PSRun, worker: int, shard: ShardServer, parts: list[_Part], pulled: list[int],
                 gradient: _Gradient, ready: list[list[Any]], applied: Any) -> Generator[Any, Any, None]:  # fmt: skip
    """Apply each part as it arrives and pull it back at once: MXNet's dist_async updates a key
    when its push arrives and the worker pulls that key when the push is acknowledged."""
    _nothing_to_pull(run, shard, ready)
    read = 0
    previous = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        yield part.pushed
        if i == 0:  # the version this gradient was computed from (its forward has pulled it)
            read = pulled[shard.index]
        share = run.segments[part.segment].shard_fraction[shard.index]
        staleness = yield from shard.apply(read, share, last)
        if last:
            gradient.shard_applied(staleness)
            applied.succeed()
        previous = run.env.process(
            _pull_part(run, worker, shard, part.segment, previous, ready[part.segment][shard.index], pulled,
                       last, gradient)
        )  # fmt: skip


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
        gradient = _Gradient(run, worker, lag)
        pushes = _new_parts(run)
        parts, next_ready = _ready_events(run)
        applied = [env.event() for _ in run.shards]
        for shard in run.shards:
            env.process(
                _async_shard(
                    run, worker, shard, pushes[shard.index], pulled, gradient, parts, applied[shard.index]
                )
            )
        yield from _pipelined_step(run, worker, ready, run.compute_time(worker), pushes)
        ready = next_ready


def _sync_pipelined_shard(run: PSRun, worker: int, shard: ShardServer, parts: list[_Part], step: int,
                          ready: list[list[Any]], pulled: list[int]) -> Generator[Any, Any, None]:  # fmt: skip
    """Each part is a round of its own: summed as the workers' parts arrive, updated when the last
    arrives, then pulled back (MXNet's dist_sync server merges and updates per key)."""
    _nothing_to_pull(run, shard, ready)
    previous = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        yield part.pushed
        share = run.segments[part.segment].shard_fraction[shard.index]
        yield from shard.aggregate((step, part.segment), share, last)
        yield shard.round_done((step, part.segment))
        previous = run.env.process(
            _pull_part(run, worker, shard, part.segment, previous, ready[part.segment][shard.index], pulled,
                       last, None)
        )  # fmt: skip
    if previous is not None:
        yield previous


def pipelined_sync_worker(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """ps-sync with layer-wise pushes and priority pulls: the barrier is each shard's round."""
    env = run.env
    pulled = [0] * len(run.shards)
    ready = [env.timeout(0) for _ in run.segments]
    for step in range(run.config.steps):
        pushes = _new_parts(run)
        parts, next_ready = _ready_events(run)
        exchanges = [env.process(_sync_pipelined_shard(run, worker, s, pushes[s.index], step, parts, pulled))
                     for s in run.shards]  # fmt: skip
        env.process(_finish_sync_step(run, worker, step, exchanges))
        yield from _pipelined_step(run, worker, ready, run.compute_time(worker), pushes)
        ready = next_ready
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
        released, delivered = run.env.event(), run.env.event()

        def reply() -> Any:
            size = run.param_bytes[shard.index]
            run.env.process(_blocking_send(run, shard.device, device, size, released, delivered))
            return released

        yield from shard.reply(reply)
        yield delivered
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
