"""Run one parameter-server configuration: build the shards and workers, simulate, collect.

:func:`simulate_parameter_server` is the engine-level entry (a built topology, a training
configuration); :func:`simcore.paramserver.run.run_parameter_server` loads the cluster by name and
returns the :class:`~simcore.paramserver.report.PSResult` the what-if prints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity, rank_compute_times
from simcore.compute.power import power_capped
from simcore.compute.roofline import ComputeModel
from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.net.network import Network, link_name
from simcore.paramserver.config import MODES, PSConfig
from simcore.paramserver.layout import (
    ShardLayout,
    default_shards,
    server_devices,
    shard_layers,
)
from simcore.paramserver.pipeline import Segment, segments
from simcore.paramserver.server import ACCUMULATOR_BYTES, ShardServer
from simcore.paramserver.state import PSRun, Records
from simcore.paramserver.worker import (
    async_worker,
    pipelined_async_worker,
    pipelined_sync_worker,
    sync_worker,
)

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.strategies.base import TrainingConfig
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = ["PSOutcome", "PSPlan", "plan_parameter_server", "simulate_parameter_server"]


@dataclass(frozen=True, slots=True)
class PSOutcome:
    """What one simulated parameter-server run produced, before it is summarised."""

    config: PSConfig
    training: TrainingConfig
    workload: Workload
    topology: Topology
    workers: int
    records: Records
    layout: ShardLayout
    server_devices: tuple[str, ...]
    compute_s: tuple[float, ...]  # nominal per-gradient compute per worker (device x straggler)
    shard_busy_s: tuple[float, ...]
    elapsed_s: float
    link_utilisation: dict[str, float]  # link kind -> busiest link of that kind's utilisation
    busiest_links: dict[str, float]  # the most utilised links ("u->v" -> utilisation over the run)
    bottleneck_link: str
    bottleneck_utilisation: float


def _server_times(
    topology: Topology,
    device: str,
    params: int,
    training: TrainingConfig,
    calibration: CalibrationProfile | None,
) -> tuple[float, float]:
    """(update, aggregate-one-gradient) seconds for ``params`` parameters on ``device``."""
    spec = device_spec(str(topology.node(device).get("gpu", "")) or "cpu")
    if spec.kind == "gpu":  # a GPU server runs under the run's board limit too
        spec = power_capped(spec, training.power_limit_w)
    model = ComputeModel(spec, training.dtype, calibration)
    update = model.optimizer_time_s(params, training.optimizer)
    aggregate = params * (ACCUMULATOR_BYTES + training.grad_bytes) / model.memory_bandwidth_Bps
    return update, aggregate


@dataclass(frozen=True, slots=True)
class PSPlan:
    """What a run needs that does not depend on its mode or steps: shards, their devices and times,
    each worker's compute and the layer-wise segments (priced once for the modes of one point)."""

    layout: ShardLayout
    devices: tuple[str, ...]
    servers: tuple[
        tuple[str, int, float, float], ...
    ]  # per kept shard: device, params, update s, aggregate s
    grad_bytes: tuple[float, ...]
    param_bytes: tuple[float, ...]
    compute_s: tuple[float, ...]
    segments: tuple[Segment, ...]
    planned_for: tuple[object, ...]  # the objects and values it was planned for (see _matches)


def _planned_for(
    workload: Workload, training: TrainingConfig, topology: Topology, ps: PSConfig, workers: int,
    calibration: CalibrationProfile | None,
) -> tuple[object, ...]:  # fmt: skip
    return (workload, topology, calibration, training, ps.shards, ps.placement, workers)


def _matches(plan: PSPlan, planned_for: tuple[object, ...]) -> bool:
    """The same workload, topology and profile objects, and equal settings."""
    objects = all(a is b for a, b in zip(plan.planned_for[:3], planned_for[:3], strict=True))
    return objects and plan.planned_for[3:] == planned_for[3:]


def plan_parameter_server(
    workload: Workload,
    training: TrainingConfig,
    topology: Topology,
    ps: PSConfig,
    *,
    workers: int,
    calibration: CalibrationProfile | None = None,
) -> PSPlan:
    """The mode-independent part of a run of ``ps`` on the first ``workers`` ranks of ``topology``."""
    shards = ps.shards or default_shards(topology, workers, ps.placement)
    layout = shard_layers(workload, shards)
    devices = server_devices(topology, workers, shards, ps.placement)
    servers: list[tuple[str, int, float, float]] = []
    grad_bytes: list[float] = []
    param_bytes: list[float] = []
    kept: list[int] = []  # layout index of each server
    for index, (device, params) in enumerate(zip(devices, layout.shard_params, strict=True)):
        if params == 0:
            continue  # more shards than layers with parameters: an empty shard takes no traffic
        kept.append(index)
        update, aggregate = _server_times(topology, device, params, training, calibration)
        servers.append((device, params, update, aggregate))
        grad_bytes.append(float(params * training.grad_bytes))
        param_bytes.append(float(params * training.param_bytes))
    accumulation = training.accumulation_steps(workers)
    compute = rank_compute_times(
        topology,
        workload,
        training.dtype,
        training.micro_batch,
        accumulation=accumulation,
        recompute=training.activation_checkpointing,
        calibration=calibration,
        software_era=training.software_era,
        power_limit_w=training.power_limit_w,
    )[:workers]
    worker_device = str(topology.node(topology.ranks[0]).get("gpu", "")) or "cpu"
    cut = segments(workload, layout, worker_device, training.dtype, training.micro_batch, calibration)
    cut = tuple(replace(seg, shard_fraction=tuple(seg.shard_fraction[i] for i in kept)) for seg in cut)
    return PSPlan(
        layout,
        tuple(devices),
        tuple(servers),
        tuple(grad_bytes),
        tuple(param_bytes),
        tuple(float(c) for c in compute),
        cut,
        _planned_for(workload, training, topology, ps, workers, calibration),
    )


def _build_run(
    sim: Simulation,
    network: Network,
    plan: PSPlan,
    ps: PSConfig,
    workers: int,
    heterogeneity: Heterogeneity,
) -> PSRun:
    servers = [
        ShardServer(
            sim.env, index, device, params, update_time_s=update, aggregate_time_s=aggregate, workers=workers
        )
        for index, (device, params, update, aggregate) in enumerate(plan.servers)
    ]
    return PSRun(
        sim,
        network,
        ps,
        servers,
        network.topology.ranks[:workers],
        plan.compute_s,
        heterogeneity,
        grad_bytes=plan.grad_bytes,
        param_bytes=plan.param_bytes,
        segments=plan.segments if ps.layerwise and ps.mode != "ps-mitigated" else (),
    )


BUSIEST_LINKS = 5  # links listed by utilisation in a run's summary


def _link_summary(
    network: Network, elapsed_s: float
) -> tuple[dict[str, float], dict[str, float], str, float]:
    """(utilisation of the busiest link per kind, the busiest links, bottleneck link, its utilisation)."""
    if elapsed_s <= 0 or not len(network.stats):
        return {}, {}, "", 0.0
    by_kind = {row.kind: row.max_utilisation for row in network.link_summary(elapsed_s)}
    per_link = network.utilisation(elapsed_s)
    ranked = sorted(per_link.items(), key=lambda item: (-item[1], item[0]))[:BUSIEST_LINKS]
    busiest = {link_name(edge): value for edge, value in ranked}
    edge = network.bottleneck_link()
    if edge is None:
        return by_kind, busiest, "", 0.0
    return by_kind, busiest, link_name(edge), per_link.get(edge, 0.0)


def simulate_parameter_server(
    workload: Workload,
    training: TrainingConfig,
    topology: Topology,
    ps: PSConfig,
    *,
    workers: int | None = None,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
    plan: PSPlan | None = None,
) -> PSOutcome:
    """Simulate ``ps`` with the first ``workers`` ranks of ``topology`` as workers (default: all).

    Same seed, same result: jitter draws come from the simulation's RNG in event order. ``plan``:
    :func:`plan_parameter_server`'s result for these arguments, shared by several modes' runs
    (one made for other arguments is not used).
    """
    workers = topology.world_size if workers is None else workers
    if not 1 <= workers <= topology.world_size:
        raise TrainsimError(
            f"parameter server: {workers} workers do not fit a cluster of {topology.world_size} ranks"
        )
    heterogeneity.check(workers)
    if plan is None or not _matches(
        plan, _planned_for(workload, training, topology, ps, workers, calibration)
    ):
        plan = plan_parameter_server(
            workload, training, topology, ps, workers=workers, calibration=calibration
        )
    sim = Simulation(seed)
    network = Network(sim.env, topology)
    run = _build_run(sim, network, plan, ps, workers, heterogeneity)
    barrier = MODES[ps.mode].barrier
    if run.segments:
        process = pipelined_sync_worker if barrier else pipelined_async_worker
    else:
        process = sync_worker if barrier else async_worker
    for worker in range(workers):
        sim.env.process(process(run, worker))
    sim.run(None if barrier else run.finished)  # asynchronous workers never stop by themselves
    elapsed = sim.now
    by_kind, busiest, bottleneck, utilisation = _link_summary(network, elapsed)
    return PSOutcome(
        ps,
        training,
        workload,
        topology,
        workers,
        run.records,
        plan.layout,
        plan.devices,
        tuple(float(c) for c in run.base_compute_s),
        tuple(s.busy_s for s in run.shards),
        elapsed,
        by_kind,
        busiest,
        bottleneck,
        utilisation,
    )
