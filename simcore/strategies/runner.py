"""Run a strategy's step for one (cluster, GPU count) point and summarise it as a StepReport.

Symmetry: in homogeneous synchronous data parallelism every rank runs the same plan, so one
representative rank (rank 0) is simulated; collective times come from
:func:`simcore.collectives.collective_time` (cached per topology), so the cost is nearly flat in the
number of GPUs. ``config.steps`` > 1 runs that many steps; with ``compute_jitter_sigma`` > 0 the
compute is scaled by lognormal(0, sigma) draws from the seeded RNG, as ``config.jitter_scope``
says: ``"step"`` (one draw per rank per step: the slowest rank's factor scales the whole step's
compute, a synchronous step waiting for it once) or ``"sync"`` (one draw per rank per
synchronisation interval: the compute between two points where the rank waits on a collective,
each interval gated by its slowest rank; FSDP, with a wait per unit, pays the expected maximum many
times per step, DDP once). Measure sigma as the spread of one rank's per-step (or per-unit)
compute time: ``log(p84 / p50)`` of its forward + backward durations. The what-if passes
:func:`simcore.compute.heterogeneity.sync_compute_scale` as ``compute_scale`` for stragglers, mixed devices
and jitter; parameter servers, which need per-rank processes, are :mod:`simcore.paramserver`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.fp8 import compute_model
from simcore.compute.heterogeneity import is_mixed_devices
from simcore.compute.optimizer import canonical_impl, check_impl_supported
from simcore.compute.precision import COMPUTE_DTYPES, check_precision, resolve_precision
from simcore.compute.rank_spread import spread_ranks
from simcore.engine import Simulation
from simcore.hardware import device_spec
from simcore.report import LinkBusy, StepReport
from simcore.step.caches import StepCaches
from simcore.step.cost import CostModel
from simcore.step.des import run_plan
from simcore.step.eventfree import evaluate_plan
from simcore.step.plan import COMM, PlanRun, StepPlan
from simcore.strategies import STRATEGIES
from simcore.strategies.base import (
    CollectiveFn,
    ConcurrentFn,
    LayerTimer,
    StepContext,
    Strategy,
    TrainingConfig,
    contention_table,
    model_flops_per_step,
)
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Workload

__all__ = [
    "StepResult",
    "collective_model",
    "comm_slowdown_under_compute",
    "concurrent_model",
    "gating_device",
    "make_context",
    "nics_on_host",
    "percentile",
    "rank_groups",
    "report_step",
    "simulate_step",
    "sync_intervals",
]


def rank_groups(topology: Topology) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(world, rank 0's node, rank 0's peers at the same local index on every node)."""
    world = tuple(range(topology.world_size))
    host_of = [topology.host_of_rank(r) for r in world]  # once per rank: linear in the world size
    node = tuple(r for r in world if host_of[r] == host_of[0])
    first_on: dict[int, int] = {}
    for r in world:
        first_on.setdefault(host_of[r], r)
    cross = tuple(first_on[h] for h in sorted(first_on))
    return world, node, cross


def collective_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> CollectiveFn:
    """Price collectives on ``topology`` by simulating their flows
    (:class:`~simcore.step.cost.CostModel` in ``"flow"`` mode; a calibration profile's fit answers
    where it has one).

    Unless ``exact``, a size is priced by linear interpolation between the two powers of two
    around it (each simulated once): exact for alpha-beta costs whenever the algorithm chosen is
    the same at both ends, and it keeps DDP's many slightly different bucket sizes from each
    costing a simulation.
    """
    return CostModel(topology, calibration, "flow", exact).collective_fn()


def concurrent_model(
    topology: Topology, calibration: CalibrationProfile | None = None, *, exact: bool = False
) -> ConcurrentFn:
    """Price one collective run by several same-shape groups at once (HSDP's replicate groups)
    with :func:`simcore.collectives.concurrent_collective_time`; a calibration profile's measured
    fit for the first group's shape answers instead, as in :func:`collective_model`."""
    return CostModel(topology, calibration, "flow", exact).concurrent_fn()


def gating_device(topology: Topology, dtype: str) -> DeviceSpec:
    """The device a synchronous step is gated by: the slowest at ``dtype`` (ties: least memory).

    On a homogeneous cluster that is every rank's device. On a mixed one every synchronous rank
    waits for the slowest, so it stands for all; its memory is also the tightest when the slower
    device is the smaller one (each rank on its own device needs per-rank processes).
    """
    names = sorted({topology.gpu_spec_name(r) or "cpu" for r in range(topology.world_size)})
    devices = [device_spec(name) for name in names]
    fsdp = STRATEGIES["fsdp"]
    needs = (
        resolve_precision("auto", dtype, fsdp.name, framework=fsdp.framework)
        if dtype in COMPUTE_DTYPES
        else None
    )
    for device in devices:
        if needs is not None:
            check_precision(needs, device.peak_flops, device.name)
    return min(devices, key=lambda d: (d.flops(dtype), d.memory_bytes, d.name))


def make_context(
    workload: Workload,
    config: TrainingConfig,
    topology: Topology,
    *,
    calibration: CalibrationProfile | None = None,
    timer: LayerTimer | None = None,
    collective: CollectiveFn | None = None,
    device_memory_bytes: int | None = None,
    concurrent: ConcurrentFn | None = None,
    caches: StepCaches | None = None,
) -> StepContext:
    """A step context for ``topology``'s ranks on their :func:`gating_device`, unless a timer is given.

    ``collective`` replaces the simulated collective model; ``concurrent`` then prices same-shape
    groups together (None: one at a time, unless ``collective`` is None too). ``caches``: the
    sweep's :class:`~simcore.step.caches.StepCaches` (None: the context's own)."""
    if timer is None or device_memory_bytes is None:
        device = gating_device(topology, config.dtype)
        timer = timer or compute_model(
            device,
            config.dtype,
            calibration,
            config.fp8,
            compiled=config.compile,
            software_era=config.software_era,
            microbatches=config.accumulation_steps(topology.world_size),
            power_limit_w=config.power_limit_w,
            ranks=spread_ranks(
                config.rank_spread,
                topology.world_size,
                explicit_speeds=config.compute_jitter_sigma > 0 or is_mixed_devices(topology),
            ),
        )
        device_memory_bytes = device_memory_bytes or device.memory_bytes
        if config.optimizer_impl not in ("auto",):
            check_impl_supported(canonical_impl(config.optimizer_impl), device.kind, device.name)
    world, node, cross = rank_groups(topology)
    return StepContext(
        workload,
        config,
        len(world),
        timer,
        collective or collective_model(topology, calibration),
        world,
        node,
        cross,
        device_memory_bytes,
        concurrent=concurrent if collective is not None else concurrent_model(topology, calibration),
        nics_per_node=nics_on_host(topology, topology.host_of_rank(0)),
        caches=caches if caches is not None else StepCaches(),
    )


def nics_on_host(topology: Topology, host: int) -> int:
    """Network adapters on ``host`` (what NCCL spreads its channels over across nodes)."""
    return sum(
        1 for _, a in topology.graph.nodes(data=True) if a.get("kind") == "nic" and a.get("host") == host
    )


@dataclass(slots=True)
class StepResult:
    """A simulated step: the plan, the first run in detail and every step's duration."""

    plan: StepPlan
    run: PlanRun
    step_times_s: list[float]


def simulate_step(
    strategy: Strategy,
    ctx: StepContext,
    *,
    seed: int = 0,
    slowdown: float | None = 1.0,
    compute_scale: Callable[[Simulation, int], float | Mapping[str, float]] | None = None,
    path: str = "des",
) -> StepResult:
    """Build ``strategy``'s plan and run it for ``ctx.config.steps`` steps in one seeded simulation.

    ``compute_scale(sim, step)`` gives a step's compute slowdown factor (one, or one per rank prefix
    of a per-rank plan, see :func:`~simcore.step.des.run_plan`); by default 1, or the
    lognormal jitter of the config. Identical steps (no jitter) are run once and repeated.
    ``slowdown``: compute's slowdown while a collective runs; None models each collective's own
    (SMs of its channels) and the collectives' slowdown under compute
    (:mod:`simcore.step.plan`).
    ``path="fast"`` evaluates each step without SimPy (:func:`simcore.step.eventfree.evaluate_plan`,
    the same result); the simulation then only supplies the seeded random stream.
    """
    plan = strategy.build_plan(ctx)
    run = _evaluate_plan if path == "fast" else run_plan
    cfg = ctx.config
    sim = Simulation(seed)
    if compute_scale is None and cfg.compute_jitter_sigma > 0:
        sigma, ranks = cfg.compute_jitter_sigma, ctx.gpus

        def compute_scale(sim: Simulation, step: int) -> float:
            import numpy as np

            return float(np.max(sim.rng.lognormal(0.0, sigma, size=ranks)))

    if compute_scale is not None and cfg.jitter_scope == "sync":
        return _simulate_per_interval(plan, ctx, sim, slowdown, compute_scale)

    comm_slowdown = comm_slowdown_under_compute(ctx) if slowdown is None else 1.0
    first = run(
        sim,
        plan,
        capacity_bytes=ctx.device_memory_bytes,
        slowdown=slowdown,
        compute_scale=compute_scale(sim, 0) if compute_scale else 1.0,
        comm_slowdown=comm_slowdown,
    )
    times = [first.step_time_s]
    for step in range(1, cfg.steps):
        if compute_scale is None:
            times.append(first.step_time_s)
            continue
        again = run(
            sim,
            plan,
            capacity_bytes=ctx.device_memory_bytes,
            slowdown=slowdown,
            compute_scale=compute_scale(sim, step),
            comm_slowdown=comm_slowdown,
        )
        times.append(again.step_time_s)
    return StepResult(plan, first, times)


def comm_slowdown_under_compute(ctx: StepContext) -> float:
    """Collectives' slowdown while compute runs beside them (GPUs whose SMs are known), else 1."""
    sms = int(getattr(getattr(ctx.timer, "curve", None), "sms", 0) or 0)
    return float(contention_table()["comm_slowdown_under_compute"]) if sms > 0 else 1.0


def sync_intervals(plan: StepPlan) -> list[int]:
    """Interval index of every operation: a new interval starts at each compute operation that
    waits on a collective (a synchronisation point of the rank with the others)."""
    comm_ids = {op.id for op in plan.ops if op.stream == COMM}
    interval, index = [], 0
    for op in plan.ops:
        if op.stream != COMM and any(i in comm_ids for i in op.after):
            index += 1
        interval.append(index)
    return interval


def _simulate_per_interval(
    plan: StepPlan,
    ctx: StepContext,
    sim: Simulation,
    slowdown: float | None,
    draw: Callable[[Simulation, int], float | Mapping[str, float]],
) -> StepResult:
    """Steps whose compute intervals (:func:`sync_intervals`) each take a fresh gating factor
    ``draw(sim, step)`` (the slowest rank's; a per-rank mapping falls back to its slowest)."""
    from dataclasses import replace

    interval = sync_intervals(plan)
    runs: list[PlanRun] = []
    for step in range(ctx.config.steps):
        draws = []
        for _ in range(max(interval) + 1):
            factor = draw(sim, step)
            draws.append(max(factor.values(), default=1.0) if isinstance(factor, Mapping) else float(factor))
        scaled = replace(plan, ops=[
            replace(op, duration_s=op.duration_s * float(draws[interval[op.id]])) if op.stream != COMM else op
            for op in plan.ops
        ])  # fmt: skip
        runs.append(run_plan(
            sim, scaled, capacity_bytes=ctx.device_memory_bytes, slowdown=slowdown,
            comm_slowdown=comm_slowdown_under_compute(ctx) if slowdown is None else 1.0,
        ))  # fmt: skip
    return StepResult(plan, runs[0], [r.step_time_s for r in runs])


def _evaluate_plan(
    sim: Simulation,
    plan: StepPlan,
    *,
    capacity_bytes: float,
    slowdown: float | None = 1.0,
    compute_scale: float | Mapping[str, float] = 1.0,
    comm_slowdown: float = 1.0,
) -> PlanRun:
    """:func:`run_plan`'s result from the event-free evaluator (the simulation is not advanced)."""
    return evaluate_plan(
        plan, capacity_bytes=capacity_bytes, slowdown=slowdown, compute_scale=compute_scale,
        comm_slowdown=comm_slowdown,
    )  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default method), without numpy.ma."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _link_busy(run: PlanRun, plan: StepPlan) -> tuple[dict[str, float], str]:
    busy = LinkBusy()
    links = {op.name: op.link for op in plan.ops if op.stream == COMM}
    for span in run.spans:
        if span.stream == COMM:
            busy.add(span.link_kind, links.get(span.name, ""), span.start_s, span.end_s)
    return busy.utilisation(run.step_time_s or 1.0), busy.bottleneck()


def report_step(
    result: StepResult, ctx: StepContext, *, cluster: str, device: str, peak_flops: float
) -> StepReport:
    """Summarise a simulated step (scaling efficiency is filled in later against one GPU)."""
    p50 = percentile(result.step_times_s, 50)
    p99 = percentile(result.step_times_s, 99)
    cfg, workload = ctx.config, ctx.workload
    compute_s = result.plan.compute_s()
    peak = result.run.memory.peak()
    utilisation, bottleneck = _link_busy(result.run, result.plan)
    samples_per_s = cfg.global_batch / p50
    mfu = model_flops_per_step(workload, cfg.global_batch) / (ctx.gpus * peak_flops * p50)
    comm_s = (
        math.fsum(s.end_s - s.start_s for s in result.run.spans if s.stream == COMM)
        if result.run.spans
        else 0.0
    )
    return StepReport(
        cluster=cluster,
        strategy=result.plan.strategy,
        gpus=ctx.gpus,
        model=workload.name,
        device=device,
        global_batch=cfg.global_batch,
        micro_batch=cfg.micro_batch,
        accumulation_steps=ctx.accumulation,
        step_time_s=p50,
        step_time_p99_s=p99,
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * workload.tokens_per_sample if workload.tokens_per_sample else None,
        scaling_efficiency=None,
        baseline_fits=None,
        mfu=mfu,
        compute_s=compute_s,
        exposed_comm_s=max(0.0, result.run.step_time_s - compute_s),
        comm_s=comm_s,
        comm_bytes=result.plan.comm_bytes(),
        peak_memory_bytes=peak.peak_bytes,
        peak_phase=peak.phase,
        memory_breakdown=dict(peak.breakdown),
        memory_capacity_bytes=float(peak.capacity_bytes),
        fits=peak.fits,
        oom_verdict=peak.verdict(),
        link_utilisation=utilisation,
        bottleneck_link=bottleneck,
        memory_status=peak.status,
        **_assumptions(ctx, result.plan.strategy),
    )


def _assumptions(ctx: StepContext, name: str) -> dict[str, str]:
    """The precision mode and optimizer implementation the strategy's step assumed, and its note."""
    strategy = STRATEGIES.get(name)
    if strategy is None:  # a strategy outside the registry (test doubles)
        return {}
    return {
        "precision": ctx.precision(strategy).describe(),
        "optimizer_impl": ctx.optimizer_impl(strategy),
        "note": strategy.assumption_note(ctx),
    }
