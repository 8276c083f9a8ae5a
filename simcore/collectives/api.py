"""Public entry points: plan, cost, choose and run a collective over a group of ranks.

Unit layouts (one byte, per op, group and algorithm), priced plans (per size, protocol and options)
and uncontended results are cached per topology object (weakly: a dropped topology drops its cache).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from simcore.calibration.collective_cost import calibrated_cost
from simcore.collectives.cost import PhaseCost, link_times, materialize, plan_cost
from simcore.collectives.gc_pause import gc_paused
from simcore.collectives.group import GroupInfo, group_info
from simcore.collectives.options import DEFAULT_OPTIONS, NcclOptions, algorithm_name
from simcore.collectives.plan import Plan, PlanContext
from simcore.collectives.registry import ALGORITHMS, OPS
from simcore.collectives.result import CollectiveResult, LinkRef, link_ref
from simcore.collectives.ring import node_contiguous
from simcore.collectives.runner import RunCounter, check_mode, run_plan
from simcore.collectives.selection import (
    REPRESENTATIVE_NODES,
    Unit,
    as_whole,
    best_protocol,
    check_algorithm,
    choose,
)
from simcore.collectives.tuning import PROTOCOLS
from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.net.network import Network
from simcore.net.routing import Router
from simcore.topology import Topology

# simpy: here for type names only (importing them would slow every --help)
if TYPE_CHECKING:
    import simpy

    from simcore.calibration.profile import CalibrationProfile

__all__ = [
    "CollectiveResult",
    "LinkRef",
    "Priced",
    "build_plan",
    "choose_algorithm",
    "closed_form_time",
    "collective_time",
    "price",
    "runnable_plan",
    "start_collective",
]

Splits = Sequence[Sequence[float]] | None


@dataclass(frozen=True, slots=True)
class Priced:
    """A collective priced for one size: algorithm, protocol, per-phase costs, closed form, bottleneck.

    ``plan`` is the runnable plan, or None when the group spans more than
    :data:`~simcore.collectives.selection.REPRESENTATIVE_NODES` nodes and was priced through its
    representative (symmetry); :func:`runnable_plan` lays such a group out in full when a run needs it.
    """

    op: str
    algorithm: str
    protocol: str
    size_bytes: float
    group: tuple[int, ...]
    costs: tuple[PhaseCost, ...]
    closed_form_s: float
    bottleneck: LinkRef | None
    info: GroupInfo
    plan: Plan | None
    key: tuple[Any, ...] = ()


@dataclass
class _TopologyCache:
    route: Any
    platform: NcclOptions = DEFAULT_OPTIONS  # the NCCL environment the cluster's network plugin sets
    infos: dict[tuple[Any, ...], GroupInfo] = field(default_factory=dict)
    units: dict[tuple[Any, ...], Unit] = field(default_factory=dict)
    priced: dict[tuple[Any, ...], Priced] = field(default_factory=dict)
    results: dict[tuple[Any, ...], CollectiveResult] = field(default_factory=dict)


def _cache(topology: Topology, network: Network | None = None) -> _TopologyCache:
    """This topology's cache, kept with it (:meth:`~simcore.topology.Topology.derived`): routes
    come from ``network``'s router, else the topology's shared one."""

    def make() -> _TopologyCache:
        router = network.router if network is not None else Router.for_topology(topology)
        platform = NcclOptions.from_env(dict(topology.metadata.get("nccl_env", {})))
        return _TopologyCache(router.route, platform)

    return topology.derived("collective costs", make)


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


def _splits(splits: Splits, ranks: int) -> tuple[tuple[float, ...], ...]:
    """all_to_allv weights, scaled so that a rank sends one byte on average (``size`` x this on the wire)."""
    if splits is None:
        return ()
    rows = [[float(v) for v in row] for row in splits]
    if len(rows) != ranks or any(len(r) != ranks for r in rows):
        raise TrainsimError(f"splits must be a {ranks}x{ranks} matrix of bytes (rank i sends [i][j] to j)")
    if any(not math.isfinite(v) or v < 0 for r in rows for v in r):
        raise TrainsimError("splits must be finite numbers of bytes >= 0")
    total = sum(v for i, r in enumerate(rows) for j, v in enumerate(r) if i != j)
    if total <= 0:
        return tuple(tuple(0.0 for _ in r) for r in rows)
    return tuple(tuple(v * ranks / total for v in r) for r in rows)


def _context(
    topology: Topology,
    group: Sequence[int] | None,
    root: int | None,
    servers: Sequence[int] | None,
    splits: Splits = None,
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
    return PlanContext(topology, route, ranks, root_rank, server_ranks, _splits(splits, len(ranks)))


def _protocol(name: str | None) -> str | None:
    if name is None:
        return None
    for proto in PROTOCOLS:
        if name.strip().lower() == proto.lower():
            return proto
    raise TrainsimError(f"unknown protocol {name!r}; allowed: {', '.join(PROTOCOLS)}")


def _algorithm(op: str, name: str | None) -> str | None:
    if name is None:
        return None
    canonical = name if name in ALGORITHMS[op] else (algorithm_name(name) or name)
    check_algorithm(op, canonical)
    return canonical


def _info(ctx: PlanContext, options: NcclOptions) -> GroupInfo:
    cache = _cache(ctx.topology)
    key = (ctx.group, options)
    info = cache.infos.get(key)
    if info is None:
        info = cache.infos[key] = group_info(ctx, options)
    return info


def _unit(ctx: PlanContext, op: str, algorithm: str) -> Unit:
    """``algorithm`` laid out for a one-byte ``op`` on ``ctx.group``, with each phase's link time per byte."""
    cache = _cache(ctx.topology)
    key = (op, ctx.group, algorithm, ctx.root, ctx.servers, ctx.splits)
    unit = cache.units.get(key)
    if unit is None:
        with gc_paused():
            phases = ALGORITHMS[op][algorithm](ctx, 1.0)
        times = [link_times(ctx.topology, p) for p in phases]
        phases = tuple(replace(p, stage_s_per_byte=t[1]) for p, t in zip(phases, times, strict=True))
        plan = Plan(op, algorithm, 1.0, ctx.group, phases)
        unit = cache.units[key] = (plan, [t[0] for t in times])
    return unit


def _representative(ctx: PlanContext) -> PlanContext:
    """The group's first :data:`REPRESENTATIVE_NODES` nodes (the whole group if it is no larger)."""
    blocks = ctx.hosts_in_order(ctx.group)
    if len(blocks) <= REPRESENTATIVE_NODES:
        return ctx
    keep = tuple(r for b in blocks[:REPRESENTATIVE_NODES] for r in b)
    root = ctx.root if ctx.root in keep else keep[0]
    splits: tuple[tuple[float, ...], ...] = ()
    if ctx.splits:
        index = [ctx.group.index(r) for r in keep]
        splits = tuple(tuple(ctx.splits[i][j] for j in index) for i in index)
    return PlanContext(ctx.topology, ctx.route, keep, root, ctx.servers, splits)


def price(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    root: int | None = None,
    servers: Sequence[int] | None = None,
    splits: Splits = None,
    options: NcclOptions | None = None,
) -> Priced:
    """``op`` priced on ``topology``: the chosen (or pinned) algorithm and protocol, laid out and costed."""
    _check_op(op)
    size = _check_size(size_bytes)
    cache = _cache(topology)
    options = (options or DEFAULT_OPTIONS).over(cache.platform)
    algo, proto = _algorithm(op, algorithm), _protocol(protocol)
    ctx = _context(topology, group, root, servers, splits)
    key = (op, size, ctx.group, algo, proto, ctx.root, ctx.servers, ctx.splits, options)
    priced = cache.priced.get(key)
    if priced is None:
        priced = cache.priced[key] = _price(ctx, op, size, algo, proto, options)
    return priced


def _price(
    ctx: PlanContext, op: str, size: float, algo: str | None, proto: str | None, options: NcclOptions
) -> Priced:
    info = _info(ctx, options)
    sub = _representative(ctx)
    whole = sub is ctx
    if algo is None:
        algo = choose(op, info, options, size, lambda name: _unit(sub, op, name), len(sub.group), proto)
    unit = _unit(ctx, op, algo) if whole else as_whole(*_unit(sub, op, algo), op, info, len(sub.group))
    chosen, costs, _ = best_protocol(unit, info, options, size, proto)
    closed, edge = plan_cost(costs)
    plan = None
    if whole:
        with gc_paused():
            plan = materialize(unit[0], costs, chosen, size, info)
    key = (op, size, ctx.group, algo, chosen, ctx.root, ctx.servers, ctx.splits, options)
    return Priced(
        op, algo, chosen, size, ctx.group, tuple(costs), closed, link_ref(ctx.topology, edge), info, plan, key
    )


def runnable_plan(topology: Topology, priced: Priced) -> Plan:
    """``priced`` laid out in full (for a run), with its algorithm and protocol."""
    if priced.plan is not None:
        return priced.plan
    op, size, group, algo, proto, root, servers, splits, options = priced.key
    cache = _cache(topology)
    full_key = ("full", *priced.key)
    known = cache.priced.get(full_key)
    if known is None or known.plan is None:
        ctx = PlanContext(topology, cache.route, group, root, servers, splits)
        unit = _unit(ctx, op, algo)
        _, costs, _ = best_protocol(unit, priced.info, options, size, proto)
        closed, edge = plan_cost(costs)
        with gc_paused():
            plan = materialize(unit[0], costs, proto, size, priced.info)
        known = cache.priced[full_key] = replace(priced, costs=tuple(costs), closed_form_s=closed,
                                                 bottleneck=link_ref(topology, edge), plan=plan)  # fmt: skip
    assert known.plan is not None
    return known.plan


def build_plan(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    root: int | None = None,
    servers: Sequence[int] | None = None,
    splits: Splits = None,
    options: NcclOptions | None = None,
) -> Plan:
    """The runnable plan of ``op`` (algorithm and protocol chosen as NCCL would unless pinned)."""
    priced = price(topology, op, size_bytes, group, algorithm=algorithm, protocol=protocol, root=root,
                   servers=servers, splits=splits, options=options)  # fmt: skip
    return runnable_plan(topology, priced)


def choose_algorithm(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    options: NcclOptions | None = None,
) -> str:
    """The algorithm NCCL-like tuning picks for ``op`` of ``size_bytes`` on ``group`` (see selection)."""
    return price(topology, op, size_bytes, group, options=options).algorithm


def closed_form_time(
    topology: Topology,
    op: str,
    algorithm: str | None,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    protocol: str | None = None,
    root: int | None = None,
    servers: Sequence[int] | None = None,
    options: NcclOptions | None = None,
) -> float:
    """Uncontended time (s) of ``algorithm`` (None: the chosen one) for ``op``."""
    return price(topology, op, size_bytes, group, algorithm=algorithm, protocol=protocol, root=root,
                 servers=servers, options=options).closed_form_s  # fmt: skip


def _calibrated(
    topology: Topology, op: str, size: float, group: tuple[int, ...], calibration: CalibrationProfile
) -> CollectiveResult | None:
    """The profile's answer by the project's one calibrated rule (:func:`simcore.calibration.collective_cost.calibrated_cost`)."""
    fitted = calibrated_cost(topology, op, size, group, calibration)
    if fitted is None:
        return None
    return CollectiveResult(
        op, "calibrated", size, group, fitted.time_s, fitted.time_s, None, 0, fitted.protocol
    )


def collective_time(
    topology: Topology,
    op: str,
    size_bytes: float,
    group: Sequence[int] | None = None,
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    calibration: CalibrationProfile | None = None,
    mode: str = "aggregate",
    root: int | None = None,
    servers: Sequence[int] | None = None,
    splits: Splits = None,
    options: NcclOptions | None = None,
) -> CollectiveResult:
    """``op`` of ``size_bytes`` over ``group`` (default: all ranks) with nothing else competing.

    Simulated in a private Simulation + Network. With ``calibration``, a profile that has alpha-beta
    for (op, ranks, scope) answers instead (algorithm ``"calibrated"``, its fastest protocol's line:
    :func:`simcore.calibration.collective_cost.calibrated_cost`, the rule every cost model prices by). ``root`` is for
    broadcast/reduce (default: the group's first rank); ``servers`` lists the parameter-server
    ranks for ps_push/ps_pull (default: the group's first rank); ``splits`` the bytes rank i sends
    rank j in an all_to_allv (scaled to ``size_bytes`` per rank on average); ``options`` NCCL's
    switches (:class:`~simcore.collectives.options.NcclOptions`).
    """
    check_mode(mode)
    priced = price(topology, op, size_bytes, group, algorithm=algorithm, protocol=protocol, root=root,
                   servers=servers, splits=splits, options=options)  # fmt: skip
    if calibration is not None:
        calibrated = _calibrated(topology, op, priced.size_bytes, priced.group, calibration)
        if calibrated is not None:
            return calibrated
    if priced.plan is None and mode == "aggregate":
        # Priced through its representative: by symmetry its closed form is the uncontended run's
        # time (the two agree wherever both are computed), without laying out thousands of ranks.
        return _result(priced, priced.closed_form_s, 0)
    plan = runnable_plan(topology, priced)
    check_mode(mode, plan)
    cache = _cache(topology)
    key = (id(plan), mode)  # runnable plans stay cached with the topology, so their ids stay theirs
    result = cache.results.get(key)
    if result is None:
        sim = Simulation(seed=0)
        network = Network(sim.env, topology)
        counter = RunCounter()
        proc = sim.env.process(run_plan(sim.env, network, plan, mode=mode, counter=counter))
        sim.run(proc)
        result = _result(priced, float(cast(float, proc.value)), counter.events)
        cache.results[key] = result
    return result


def _result(priced: Priced, time_s: float, events: int) -> CollectiveResult:
    return CollectiveResult(
        priced.op,
        priced.algorithm,
        priced.size_bytes,
        priced.group,
        time_s,
        priced.closed_form_s,
        priced.bottleneck,
        events,
        priced.protocol,
    )


def start_collective(
    sim: Simulation,
    network: Network,
    op: str,
    size_bytes: float,
    group: Sequence[int],
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    tag: str = "",
    mode: str = "aggregate",
    root: int | None = None,
    servers: Sequence[int] | None = None,
    splits: Splits = None,
    options: NcclOptions | None = None,
) -> simpy.Process:
    """Run ``op`` inside a live simulation, contending with everything else on ``network``.

    Returns the SimPy process; it fires when the collective completes, with a
    :class:`CollectiveResult` whose ``time_s`` is the simulated duration under contention.
    """
    check_mode(mode)
    _cache(network.topology, network)
    priced = price(network.topology, op, size_bytes, group, algorithm=algorithm, protocol=protocol, root=root,
                   servers=servers, splits=splits, options=options)  # fmt: skip
    plan = runnable_plan(network.topology, priced)
    check_mode(mode, plan)
    priced = _cache(network.topology).priced.get(("full", *priced.key), priced)

    def body() -> Any:
        counter = RunCounter()
        elapsed = yield from run_plan(sim.env, network, plan, mode=mode, tag=tag, counter=counter)
        return _result(priced, elapsed, counter.events)

    return sim.env.process(body())
