"""A parameter server on plain ``torch.distributed`` send/recv: sync, async and stale-synchronous.

Roles: ranks ``0..K-1`` are servers (``--ps-ranks K``, default 1), the rest are workers. The model's
parameters, flattened in ``model.parameters()`` order, are split into K contiguous ranges of (almost)
equal bytes, one per server. Each server holds its range and SGD momentum for it, and applies
updates; workers compute gradients on their data shard.

Messages (float32 tensors; integer fields are exact below 2**24 steps):

- worker -> server, *push*: ``[kind, step, read_version, read_clock, *gradient_range]``;
  ``kind`` is PUSH, or SHUTDOWN (the worker's last message; the server then stops expecting it).
- server -> worker, *reply*: ``[version, staleness, staleness_clocks, hold_s, *parameter_range]``,
  sent once at start (version 0) and once for every push, never for SHUTDOWN. A worker posts the
  receive for the reply *before* it pushes, so a server's send always has a matching receive.

The server receives pushes from any worker (``recv`` without ``src``). ``version`` counts updates
the server has applied; ``clock`` is the number of steps every worker has pushed (the slowest
worker's progress).

- sync: the server waits for every worker's gradient of a step, applies their mean once and replies
  to all with the new parameters. Staleness is always 0.
- async: the server applies each gradient as it arrives, scaled by ``1/workers`` (so a round of
  updates moves as far as one synchronous mean; staleness is then the only difference), and
  replies at once with the current parameters.
- ssp (bound ``s``): as async, but the reply to a worker that has pushed ``c`` steps is held while
  ``c - clock > s`` (its next step would run more than ``s`` steps ahead of the slowest worker).
  The hold time is sent back in ``hold_s``.

Staleness of an applied update, in updates: the server's version when it applies the gradient
minus the version the gradient was computed from. In clocks: the server's clock at apply minus the
clock when the worker read its parameters; SSP guarantees ``staleness_clocks <= s``. (In updates,
SSP bounds staleness by ``(workers - 1) * (2s + 1)``.) The server's GPU-free traffic runs on a
gloo group in every case, since NCCL cannot receive from an unnamed source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from simcore.paramserver.config import MODES

__all__ = ["HEADER", "PS_MODES", "PUSH", "SHUTDOWN", "PsLayout", "ServerStats", "run_server", "shard_ranges"]

# Every simulated mode but the version-checking one (ps-mitigated), by its plain name.
PS_MODES = tuple(rules.plain for rules in MODES.values() if not rules.check)
PUSH, SHUTDOWN = 1.0, 2.0
HEADER = 4  # both message kinds carry four header numbers before the tensor range


def shard_ranges(numel: int, servers: int) -> list[tuple[int, int]]:
    """Split ``numel`` float32 parameters into ``servers`` contiguous ranges of near-equal bytes."""
    bounds = [round(i * numel / servers) for i in range(servers + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(servers)]


@dataclass(frozen=True, slots=True)
class PsLayout:
    """Who serves and who works: ``servers`` ranks first, workers after them."""

    world_size: int
    servers: int

    @property
    def workers(self) -> tuple[int, ...]:
        return tuple(range(self.servers, self.world_size))

    def is_server(self, rank: int) -> bool:
        return rank < self.servers

    def worker_index(self, rank: int) -> int:
        return rank - self.servers


@dataclass(slots=True)
class ServerStats:
    """What a server saw: staleness of every applied update, and the time it held SSP replies."""

    staleness: list[int] = field(default_factory=list)
    staleness_clocks: list[int] = field(default_factory=list)
    hold_s: list[float] = field(default_factory=list)
    apply_s: float = 0.0
    wait_s: float = 0.0
    version: int = 0


@dataclass(slots=True)
class _ServerState:
    params: torch.Tensor
    momentum_buffer: torch.Tensor
    version: int
    pushes: dict[int, int]
    read: dict[int, tuple[int, int]] = field(default_factory=dict)  # worker -> (version, clock) it read
    held: dict[int, tuple[float, int, int]] = field(default_factory=dict)  # worker -> (since, staleness x2)
    round_grads: list[torch.Tensor] = field(default_factory=list)
    round_members: list[int] = field(default_factory=list)
    live: set[int] = field(default_factory=set)

    def clock(self) -> int:
        return min(self.pushes.values())


def _reply(
    state: _ServerState, worker: int, staleness: int, staleness_clocks: int, hold_s: float, group: Any
) -> None:
    header = torch.tensor([float(state.version), float(staleness), float(staleness_clocks), hold_s])
    dist.send(torch.cat([header, state.params]), dst=worker, group=group)
    state.read[worker] = (state.version, state.clock())


def _apply(state: _ServerState, grad: torch.Tensor, lr: float, momentum: float, stats: ServerStats) -> None:
    start = time.perf_counter()
    state.momentum_buffer.mul_(momentum).add_(grad)
    state.params.add_(state.momentum_buffer, alpha=-lr)
    state.version += 1
    stats.apply_s += time.perf_counter() - start


def run_server(
    params: torch.Tensor,
    *,
    mode: str,
    layout: PsLayout,
    steps: int,
    start_step: int,
    lr: float,
    momentum: float,
    staleness_bound: int,
    group: Any = None,
    version: int = 0,
    momentum_buffer: torch.Tensor | None = None,
    on_round: Callable[[int, ServerStats, _ServerState], None] | None = None,
) -> ServerStats:
    """Serve ``params`` (this server's range, float32 CPU) until every worker has sent SHUTDOWN.

    ``on_round(clock, stats, state)`` is called each time the slowest worker completes a step (for
    per-step records and checkpoints).
    """
    workers = layout.workers
    buffer = momentum_buffer if momentum_buffer is not None else torch.zeros_like(params)
    state = _ServerState(
        params=params,
        momentum_buffer=buffer,
        version=version,
        pushes=dict.fromkeys(workers, start_step),
        live=set(workers),
    )
    stats = ServerStats(version=version)
    for worker in workers:
        _reply(state, worker, -1, -1, 0.0, group)
    message = torch.empty(HEADER + params.numel())
    while state.live:
        waited = time.perf_counter()
        worker = int(dist.recv(message, group=group))
        stats.wait_s += time.perf_counter() - waited
        if message[0].item() == SHUTDOWN:
            state.live.discard(worker)
            continue
        clock_before = state.clock()
        _receive_push(
            state, worker, message[HEADER:], mode=mode, lr=lr, momentum=momentum, stats=stats, group=group
        )
        _release_held(state, mode, steps, staleness_bound, group, stats)
        if on_round is not None and state.clock() > clock_before:
            on_round(state.clock(), stats, state)
    stats.version = state.version
    return stats


def _receive_push(
    state: _ServerState,
    worker: int,
    grad: torch.Tensor,
    *,
    mode: str,
    lr: float,
    momentum: float,
    stats: ServerStats,
    group: Any,
) -> None:
    """Account one gradient: record its staleness, apply it (or its round's mean), queue the reply."""
    read_version, read_clock = state.read[worker]
    staleness, staleness_clocks = state.version - read_version, state.clock() - read_clock
    stats.staleness.append(staleness)
    stats.staleness_clocks.append(staleness_clocks)
    state.pushes[worker] += 1
    if mode != "sync":
        _apply(state, grad / len(state.pushes), lr, momentum, stats)
        state.held[worker] = (time.perf_counter(), staleness, staleness_clocks)
        return
    state.round_grads.append(grad.clone())
    state.round_members.append(worker)
    if len(state.round_members) == len(state.pushes):
        _apply(state, torch.stack(state.round_grads).mean(dim=0), lr, momentum, stats)
        for member in sorted(state.round_members):
            _reply(state, member, 0, 0, 0.0, group)
        state.round_grads, state.round_members = [], []


def _release_held(
    state: _ServerState, mode: str, steps: int, bound: int, group: Any, stats: ServerStats
) -> None:
    """Reply to every held worker allowed to go on (async: all; ssp: those within the bound)."""
    for worker in sorted(state.held):
        pushed = state.pushes[worker]
        if mode == "ssp" and pushed < steps and pushed - state.clock() > bound:
            continue
        since, staleness, staleness_clocks = state.held.pop(worker)
        hold_s = time.perf_counter() - since if mode == "ssp" else 0.0
        stats.hold_s.append(hold_s)
        _reply(state, worker, staleness, staleness_clocks, hold_s, group)
