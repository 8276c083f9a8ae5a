"""Public entry points: plan, cost, choose and run a collective over a group of ranks.

Plans and uncontended results are cached per topology object (weakly: a dropped topology drops
its cache) by (op, bytes, group, algorithm, root, servers[, mode]).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import simpy

from simcore.collectives.busbw import busbw_factor
from simcore.collectives.closed_form import plan_cost, plan_time
from simcore.collectives.gc_pause import gc_paused
from simcore.collectives.plan import Edge, Phase, Plan, PlanContext, Route, describe_link, rank_hosts
from simcore.collectives.registry import ALGORITHMS, OPS
from simcore.collectives.ring import node_contiguous
from simcore.collectives.runner import RunCounter, check_mode, run_plan
from simcore.collectives.selection import pick_fastest
from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.net.network import Network
from simcore.net.routing import Router
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = [
    "CollectiveResult",
    "build_plan",
    "choose_algorithm",
    "closed_form_time",
    "collective_time",
    "start_collective",
]


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One collective's simulated duration, its closed form, and what limited it.

    ``events`` counts the flows and timers the run put into the simulation (0 when calibrated).
    """

    op: str
    algorithm: str
    size_bytes: float
    group: tuple[int, ...]
    time_s: float
    closed_form_s: float
    bottleneck_link: str
    events: int


@dataclass
class _TopologyCache:
    route: Callable[[str, str], Route]
    plans: dict[tuple[Any, ...], Plan] = field(default_factory=dict)
    results: dict[tuple[Any, ...], CollectiveResult] = field(default_factory=dict)
    # id(plan) -> (plan, closed form, bottleneck); the plan is kept so its id stays its own
    costs: dict[int, tuple[Plan, float, Edge | None]] = field(default_factory=dict)


_CACHES: weakref.WeakKeyDictionary[Topology, _TopologyCache] = weakref.WeakKeyDictionary()


def _cache(topology: Topology, network: Network | None = None) -> _TopologyCache:
    """This topology's cache; routes come from ``network``'s router, else the topology's shared one.

    Both are normally the same :class:`~simcore.net.routing.Router` (one per topology, which caches
    every route and shares intra-server paths between servers of the same build).
    """
    cache = _CACHES.get(topology)
    if cache is None:
        router = network.router if network is not None else Router.for_topology(topology)
        cache = _CACHES[topology] = _TopologyCache(router.route)
    return cache


def _check_op(op: str) -> None:
    if op not in OPS:
        raise TrainsimError(f"unknown collective {op!r}; allowed: {', '.join(OPS)}")


def _check_size(size_bytes: float) -> float:
    if (
        isinstance(size_bytes, bool)
        or not isinstance(size_bytes, (int, float))
        or not math.isfinite(size_bytes)
        or size_bytes < 0
    ):
        raise TrainsimError(f"collective size must be a finite number of bytes >= 0, got {size_bytes!r}")
    return float(size_bytes)


def _check_ranks(topology: Topology, ranks: Sequence[int], what: str) -> tuple[int, ...]:
    out = tuple(int(r) for r in ranks)
    if not out:
        raise TrainsimError(f"{what} is empty; give at least one rank")
    for r in out:
        if not 0 <= r < topology.world_size:
            raise TrainsimError(
                f"{what} has rank {r}; topology {topology.name!r} has ranks 0..{topology.world_size - 1}"
            )
    if len(set(out)) != len(out):
        raise TrainsimError(f"{what} lists a rank twice: {list(out)}")
    return out


def _context(
    topology: Topology, group: Sequence[int] | None, root: int | None, servers: Sequence[int] | None
) -> PlanContext:
    route = _cache(topology).route
    if group is None:
        ctx = PlanContext(topology, route, tuple(range(topology.world_size)))
        ranks = node_contiguous(ctx, ctx.group)
    else:
        ranks = _check_ranks(topology, group, "group")
    root_rank = ranks[0] if root is None else int(root)
    if root_rank not in ranks:
        raise TrainsimError(f"root {root_rank} is not in the group {list(ranks)}")
    server_ranks = _check_ranks(topology, servers, "servers") if servers is not None else (ranks[0],)
    return PlanContext(topology, route, ranks, root_rank, server_ranks)


def _build(ctx: PlanContext, op: str, algorithm: str, size_bytes: float) -> tuple[Phase, ...]:
    builders = ALGORITHMS[op]
    if algorithm not in builders:
        raise TrainsimError(
            f"unknown algorithm {algorithm!r} for {op}; allowed: {', '.join(builders) or 'none yet'}"
        )
    return builders[algorithm](ctx, size_bytes)


def _plan_for(ctx: PlanContext, op: str, algorithm: str, size: float) -> Plan:
    """The pinned algorithm's plan, from the topology's cache or built and cached."""
    cache = _cache(ctx.topology)
    key = (op, size, ctx.group, algorithm, ctx.root, ctx.servers)
    plan = cache.plans.get(key)
    if plan is None:
        with gc_paused():
            phases = _build(ctx, op, algorithm, size)
        plan = cache.plans[key] = Plan(op, algorithm, size, ctx.group, phases)
    return plan


def _choose(ctx: PlanContext, op: str, size: float) -> Plan:
    """The fastest candidate's plan (see :mod:`simcore.collectives.selection`)."""
    topology = ctx.topology
    multi_node = len(set(rank_hosts(topology, ctx.group))) > 1
    name = pick_fastest(
        op,
        multi_node,
        lambda algorithm: _plan_for(ctx, op, algorithm, size).phases,
        lambda phases: plan_time(topology, Plan(op, "", size, ctx.group, phases)),
    )
    return _plan_for(ctx, op, name, size)


def build_plan(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    algorithm: str | None = None,
    root: int | None = None,
    servers: Sequence[int] | None = None,
) -> Plan:
    """The algorithm laid out on ``topology`` (chosen automatically unless ``algorithm`` pins it)."""
    _check_op(op)
    size = _check_size(size_bytes)
    ctx = _context(topology, group, root, servers)
    if algorithm is not None:
        return _plan_for(ctx, op, algorithm, size)
    cache = _cache(topology)
    key = (op, size, ctx.group, None, ctx.root, ctx.servers)
    plan = cache.plans.get(key)
    if plan is None:
        plan = cache.plans[key] = _choose(ctx, op, size)
    return plan


def choose_algorithm(
    topology: Topology, op: str, size_bytes: float, group: Sequence[int] | None = None
) -> str:
    """The algorithm NCCL-like tuning picks for ``op`` of ``size_bytes`` on ``group`` (see selection)."""
    return build_plan(topology, op, size_bytes, group).algorithm


def closed_form_time(
    topology: Topology,
    op: str,
    algorithm: str | None,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    root: int | None = None,
    servers: Sequence[int] | None = None,
) -> float:
    """Uncontended alpha-beta time (s) of ``algorithm`` (None: the chosen one) for ``op``."""
    plan = build_plan(topology, op, size_bytes, group, algorithm=algorithm, root=root, servers=servers)
    return _plan_cost(topology, plan)[0]


def _calibrated(
    topology: Topology, op: str, size: float, group: tuple[int, ...], calibration: CalibrationProfile
) -> CollectiveResult | None:
    scope = "intra_node" if len(set(rank_hosts(topology, group))) == 1 else "inter_node"
    fit = calibration.collective_alpha_beta(op, len(group), scope)
    if fit is None:
        return None
    alpha_s, busbw_Bps = fit
    t = alpha_s + busbw_factor(op, len(group)) * size / busbw_Bps
    return CollectiveResult(op, "calibrated", size, group, t, t, f"calibrated ({scope})", 0)


def collective_time(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    algorithm: str | None = None,
    calibration: CalibrationProfile | None = None,
    mode: str = "aggregate",
    root: int | None = None,
    servers: Sequence[int] | None = None,
) -> CollectiveResult:
    """``op`` of ``size_bytes`` over ``group`` (default: all ranks) with nothing else competing.

    Simulated in a private Simulation + Network. With ``calibration``, a profile that has alpha-beta
    for (op, ranks, scope) answers instead (algorithm ``"calibrated"``). ``root`` is for
    broadcast/reduce (default: the group's first rank); ``servers`` lists the parameter-server
    ranks for ps_push/ps_pull (default: the group's first rank).
    """
    check_mode(mode)
    plan = build_plan(topology, op, size_bytes, group, algorithm=algorithm, root=root, servers=servers)
    check_mode(mode, plan)
    if calibration is not None:
        calibrated = _calibrated(topology, op, plan.size_bytes, plan.group, calibration)
        if calibrated is not None:
            return calibrated
    cache = _cache(topology)
    key = (op, plan.size_bytes, plan.group, plan.algorithm, root, tuple(servers or ()), mode)
    result = cache.results.get(key)
    if result is None:
        sim = Simulation(seed=0)
        network = Network(sim.env, topology)
        counter = RunCounter()
        proc = sim.env.process(run_plan(sim.env, network, plan, mode=mode, counter=counter))
        sim.run(proc)
        result = _result(topology, plan, float(cast(float, proc.value)), counter.events)
        cache.results[key] = result
    return result


def _plan_cost(topology: Topology, plan: Plan) -> tuple[float, Edge | None]:
    """:func:`plan_cost`, computed once per plan (a plan is run again and again in training loops)."""
    costs = _cache(topology).costs
    known = costs.get(id(plan))
    if known is None or known[0] is not plan:
        known = costs[id(plan)] = (plan, *plan_cost(topology, plan))
    return known[1], known[2]


def _result(topology: Topology, plan: Plan, time_s: float, events: int) -> CollectiveResult:
    closed_form_s, bottleneck = _plan_cost(topology, plan)
    return CollectiveResult(
        plan.op,
        plan.algorithm,
        plan.size_bytes,
        plan.group,
        time_s,
        closed_form_s,
        describe_link(topology, bottleneck),
        events,
    )


def start_collective(
    sim: Simulation,
    network: Network,
    op: str,
    size_bytes: float,
    group: Sequence[int],
    *,
    algorithm: str | None = None,
    tag: str = "",
    mode: str = "aggregate",
    root: int | None = None,
    servers: Sequence[int] | None = None,
) -> simpy.Process:
    """Run ``op`` inside a live simulation, contending with everything else on ``network``.

    Returns the SimPy process; it fires when the collective completes, with a
    :class:`CollectiveResult` whose ``time_s`` is the simulated duration under contention.
    """
    check_mode(mode)
    _cache(network.topology, network)
    plan = build_plan(
        network.topology, op, size_bytes, group, algorithm=algorithm, root=root, servers=servers
    )
    check_mode(mode, plan)

    def body() -> Any:
        counter = RunCounter()
        elapsed = yield from run_plan(sim.env, network, plan, mode=mode, tag=tag, counter=counter)
        return _result(network.topology, plan, elapsed, counter.events)

    return sim.env.process(body())
