"""Discrete-event execution of a :class:`~simcore.collectives.plan.Plan` on a live network.

AGGREGATE mode (default): each phase starts all its transfers at once, each carrying the phase's
whole bytes over its hop, so a collective costs one flow per hop/edge used, not per step. The flows
of a phase share contended links in proportion to their bytes (weight = bytes / the phase's
largest transfer): NCCL's pipelined chunks move in lock step, so a phase's flows progress together
and, where nothing competes, all finish when the most loaded link drains. The bandwidth part lasts
at least the protocol's throughput floor (``engine_s``); the phase ends ``latency_s`` after that:
the latency of all the phase's steps is paid once, as one timer, exactly as in the closed form.

PER-STEP mode: each phase runs as its ``steps`` synchronised steps (for a ring all-reduce the
2(p-1) steps of S/p chunks); every step starts its chunk flows, waits for them, and then pays
one step's alpha. Where nothing competes both modes give the closed form; under contention the
per-step mode also captures how a slowed step holds the next one back.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

from simcore.collectives.gc_pause import gc_paused
from simcore.collectives.plan import Phase, Plan
from simcore.errors import TrainsimError
from simcore.net.network import Flow, Network

# simpy: here for type names only (importing them would slow every --help)
if TYPE_CHECKING:
    import simpy

__all__ = ["MAX_PER_STEP_FLOWS", "MODES", "RunCounter", "run_plan"]

MODES = ("aggregate", "per-step")

# Per-step mode starts steps x transfers flows; beyond this it is refused (meant for small groups).
MAX_PER_STEP_FLOWS = 200_000


class RunCounter:
    """Flows and timers one collective put into the simulation (its event footprint)."""

    def __init__(self) -> None:
        self.flows = 0
        self.timers = 0

    @property
    def events(self) -> int:
        return self.flows + self.timers


def check_mode(mode: str, plan: Plan | None = None) -> None:
    """TrainsimError unless ``mode`` is known (and, for per-step, ``plan`` is small enough)."""
    if mode not in MODES:
        raise TrainsimError(f"unknown collective mode {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "per-step" and plan is not None:
        flows = sum(p.steps * len(p.transfers) for p in plan.phases)
        if flows > MAX_PER_STEP_FLOWS:
            raise TrainsimError(
                f"per-step mode would start {flows} flows for {plan.op} over {len(plan.group)} ranks "
                f"(limit {MAX_PER_STEP_FLOWS}); use mode='aggregate' or a smaller group"
            )


def run_plan(
    env: simpy.Environment,
    network: Network,
    plan: Plan,
    *,
    mode: str = "aggregate",
    tag: str = "",
    counter: RunCounter | None = None,
) -> Generator[simpy.Event, Any, float]:
    """A SimPy process body running ``plan``; its value is the elapsed simulated time (s)."""
    check_mode(mode, plan)
    count = counter if counter is not None else RunCounter()
    start = float(env.now)
    for phase in plan.phases:
        steps = phase.steps if mode == "per-step" else 1
        for _ in range(max(1, steps)):
            yield from _run_step(env, network, phase, steps, tag or plan.op, count)
    return float(env.now) - start


def _run_step(
    env: simpy.Environment, network: Network, phase: Phase, steps: int, tag: str, count: RunCounter
) -> Generator[simpy.Event, Any, None]:
    """One round of ``phase``: 1/steps of every transfer (and floor), then 1/steps of its latency."""
    step_start = float(env.now)
    started = [t for t in phase.transfers if t.size_bytes > 0 and t.route]
    transfer = network.transfer
    largest = max((t.size_bytes for t in started), default=1.0)
    with gc_paused():  # never across a yield: the pause must not outlive this burst
        events = [
            transfer(
                t.src,
                t.dst,
                t.size_bytes / steps,
                route=t.route,
                tag=tag,
                weight=t.size_bytes / largest,
                arrival=False,
            )
            for t in started
        ]
    count.flows += len(events)
    sent_done = step_start
    if events:
        yield env.all_of(events)
        # Done when the last byte is sent: the phase's latency (the routes' included) is paid below.
        sent_done = max(sent_done, max(cast(Flow, done.value).sent_s for done in events))
    sent_done = max(sent_done, step_start + phase.engine_s / steps)
    wait = sent_done + phase.latency_s / steps - float(env.now)
    if wait > 0:
        count.timers += 1
        yield env.timeout(wait)
