"""A server shard inside the simulation: its version counter and a queue of updates applied one at a time.

The shard's update is a memory-bound optimizer step over its parameters
(:meth:`simcore.compute.roofline.ComputeModel.optimizer_time_s` on the device that hosts the shard). One
update runs at a time (the shard's update thread); pushes that arrive meanwhile wait in the queue,
so a hot shard or a burst of simultaneous pushes shows up as queueing. In ``ps-sync`` the shard
first sums the W gradients of a step as they arrive (each sum reads the fp32 accumulator and the
gradient and writes the accumulator back) and then applies one update.

A serial server (``PSConfig.serial_replies``, calibrate.train's ``run_server``: the whole-gradient
exchange by default) also sends each reply from that thread, with a blocking send, before it takes
the next message (:meth:`ShardServer.apply_and_reply`, :meth:`ShardServer.reply`): two pushes that
arrive together are answered one reply-time apart, so asynchronous workers fall out of step instead
of pushing and pulling in lockstep. ps-lite's server (the layer-wise default) hands replies to
ZMQ's I/O thread and they go out concurrently.

Versions: the shard's version counts the updates applied to it. The staleness of an applied
gradient on this shard is the version when its update starts minus the version the worker pulled
before computing it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

# simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import simpy


__all__ = ["ACCUMULATOR_BYTES", "RoundKey", "ShardServer"]

# fp32 accumulator read and written back per parameter when summing one gradient (ps-sync).
ACCUMULATOR_BYTES = 8
RoundKey = int | tuple[int, int]  # a ps-sync round: its step, or (step, segment) layer-wise


class ShardServer:
    """One shard: ``params`` parameters on graph node ``device``."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        device: str,
        params: int,
        *,
        update_time_s: float,
        aggregate_time_s: float,
        workers: int,
    ) -> None:
        import simpy

        self.env = env
        self.index = index
        self.device = device
        self.params = params
        self.update_time_s = update_time_s
        self.aggregate_time_s = aggregate_time_s
        self.workers = workers
        self.version = 0
        self.busy_s = 0.0
        self.updates = 0
        self._queue = simpy.Resource(env, capacity=1)
        self._round_arrivals: dict[RoundKey, int] = {}
        self._round_done: dict[RoundKey, simpy.Event] = {}

    def _work(self, seconds: float) -> Generator[Any, Any, None]:
        with self._queue.request() as turn:
            yield turn
            if seconds > 0:
                yield self.env.timeout(seconds)
            self.busy_s += seconds

    def apply(self, read_version: int, fraction: float = 1.0, last: bool = True) -> Generator[Any, Any, int]:
        """Queue and apply one gradient computed from ``read_version``; returns its staleness.

        Layer-wise, a gradient arrives in parts (one per segment): each part updates ``fraction``
        of the shard's parameters, and the ``last`` one completes the gradient (the version counts
        gradients, so it advances then)."""
        with self._queue.request() as turn:
            yield turn
            staleness = self.version - read_version
            seconds = self.update_time_s * fraction
            if seconds > 0:
                yield self.env.timeout(seconds)
            self.busy_s += seconds
            if last:
                self.version += 1
                self.updates += 1
        return staleness

    def apply_and_reply(
        self, read_version: int, reply: Callable[[int], simpy.Event | None]
    ) -> Generator[Any, Any, bool]:
        """A serial server's turn (``PSConfig.serial_replies``): apply one gradient computed from
        ``read_version``, then send its reply while the thread is still held; whether it replied.

        ``reply(staleness)`` is called once the update is applied; it starts the reply's flow and
        returns it, or returns None when the reply is held (ps-ssp; :meth:`reply` sends it later).
        calibrate.train's ``run_server`` (calibrate/train/param_server.py) replies with a blocking
        ``dist.send`` in the loop iteration that received the push (``_receive_push``, then
        ``_release_held``), so the next push waits for the reply to be sent.
        """
        with self._queue.request() as turn:
            yield turn
            staleness = self.version - read_version
            if self.update_time_s > 0:
                yield self.env.timeout(self.update_time_s)
            self.busy_s += self.update_time_s
            self.version += 1
            self.updates += 1
            flow = reply(staleness)
            if flow is not None:
                yield flow
        return flow is not None

    def reply(self, send: Callable[[], simpy.Event]) -> Generator[Any, Any, None]:
        """A serial server sends one reply from its thread: after the work queued before it, and
        holding the thread until the send is done (a blocking ``dist.send``)."""
        with self._queue.request() as turn:
            yield turn
            yield send()

    def query(self) -> Generator[Any, Any, int]:
        """Answer a version check once the update in progress (if any) is done."""
        yield from self._work(0.0)
        return self.version

    def round_done(self, round_key: RoundKey) -> simpy.Event:
        """Fires when the synchronous update of ``round_key`` (a step, or a step and a segment)
        has been applied."""
        if round_key not in self._round_done:
            self._round_done[round_key] = self.env.event()
        return self._round_done[round_key]

    def aggregate(
        self, round_key: RoundKey, fraction: float = 1.0, last: bool = True
    ) -> Generator[Any, Any, None]:
        """ps-sync: add one worker's gradient of ``round_key``; the last worker's also applies the
        update. Layer-wise, each segment's part is a round of its own over ``fraction`` of the
        shard (MXNet's server merges and updates each key when every worker has pushed it), and
        the ``last`` part's round advances the version."""
        yield from self._work(self.aggregate_time_s * fraction)
        arrived = self._round_arrivals.get(round_key, 0) + 1
        self._round_arrivals[round_key] = arrived
        if arrived == self.workers:
            del self._round_arrivals[round_key]
            yield from self._work(self.update_time_s * fraction)
            if last:
                self.version += 1
                self.updates += 1
            self.round_done(round_key).succeed(self.version)
