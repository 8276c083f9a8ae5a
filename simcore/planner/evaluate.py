"""Time one layout on one GPU count: the work a planner sweep hands to its workers.

A :class:`PlanJob` holds what every configuration of a sweep shares (the workload, the cluster and
how to load it, the base training configuration, a calibration profile, the engine path); a task
is a (GPU count, :class:`~simcore.planner.space.PlanLayout`) pair. :func:`time_layout` is the one
place a candidate is timed: pure data parallelism (no selective or every-K recompute, no offload)
on the fast path (:func:`~simcore.fastpath.step.fast_step_report`), every other layout by
:func:`simcore.parallel.step.simulate_parallel_step`. :func:`evaluate_tasks` runs a batch of tasks in one process and is
what a process pool or a Ray task calls: clusters, device timers and collective costs are cached
per process, so a worker that gets many tasks of one GPU count loads and prices that cluster once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, is_mixed_devices, sync_compute_scale
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.fastpath.path import DEFAULT_ENGINE_PATH, check_engine_path, choose_path
from simcore.fastpath.step import fast_step_report
from simcore.parallel.cache import ComposeCache
from simcore.parallel.step import simulate_parallel_step
from simcore.planner.space import PlanLayout
from simcore.report import StepReport
from simcore.strategies import get_strategy
from simcore.strategies.base import CollectiveFn, ConcurrentFn, LayerTimer, StepContext, TrainingConfig
from simcore.strategies.runner import (
    collective_model,
    concurrent_model,
    gating_device,
    make_context,
    report_step,
    simulate_step,
)
from simcore.topology import ClusterLoader, Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Workload

__all__ = ["Outcome", "PlanJob", "Task", "evaluate_tasks", "load_topology", "time_layout"]


@dataclass(frozen=True, slots=True)
class PlanJob:
    """What every configuration of one sweep shares. Picklable (the loader is a module function)."""

    workload: Workload
    cluster: str
    loader: ClusterLoader
    config: TrainingConfig
    calibration: CalibrationProfile | None = None
    engine_path: str = DEFAULT_ENGINE_PATH
    # Names this job's inputs in per-process caches (a job is unpickled afresh for every task).
    key: str = ""

    def __post_init__(self) -> None:
        check_engine_path(self.engine_path)


Task = tuple[int, PlanLayout]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One timed configuration: its report, or why it could not be timed."""

    gpus: int
    layout: PlanLayout
    report: StepReport | None  # a ParallelStepReport for a model-parallel layout
    error: str = ""
    path: str = ""


@dataclass(slots=True)
class _Cluster:
    """One loaded cluster size, with what pricing on it needs."""

    topology: Topology
    device: DeviceSpec
    timer: LayerTimer
    path: str
    collective: CollectiveFn
    concurrent: ConcurrentFn  # same-shape groups priced together (HSDP's replicate groups)
    mixed: bool  # more than one device type: each step waits for the slowest rank
    # what composed (model-parallel) steps on this cluster share across configurations
    compose: ComposeCache = field(default_factory=ComposeCache)


# Per process: (loader, cluster, gpus, dtype, calibration id, engine path) -> the loaded cluster.
_CLUSTERS: dict[tuple[object, ...], _Cluster] = {}
_TOPOLOGIES: dict[tuple[object, ...], Topology] = {}
# Per process: (workload id, cluster id, micro-batch) -> (workload, cluster, a context to copy);
# the objects are kept so that an id is not reused while its entry lives (and checked on a hit).
_CONTEXTS: OrderedDict[tuple[int, int, int], tuple[object, object, StepContext]] = OrderedDict()
CONTEXT_CACHE_SIZE = 64  # a context's caches hold per-layer and span times (kilobytes)
# Per process: one workload object per distinct workload (by value), and the last few objects seen
# (a job arrives unpickled afresh with each chunk of tasks) with theirs: caches keyed on the one
# object's identity then serve every chunk, without hashing a workload per configuration.
_WORKLOADS: dict[Workload, Workload] = {}
_WORKLOAD_OF: OrderedDict[int, tuple[Workload, Workload]] = OrderedDict()
WORKLOAD_CACHE_SIZE = 16


def load_topology(loader: ClusterLoader, cluster: str, gpus: int) -> Topology:
    """``loader(cluster, gpus=gpus)``, once per process."""
    key = (getattr(loader, "__module__", ""), getattr(loader, "__qualname__", repr(loader)), cluster, gpus)
    topology = _TOPOLOGIES.get(key)
    if topology is None:
        topology = _TOPOLOGIES[key] = loader(cluster, gpus=gpus)
    return topology


def _cluster(job: PlanJob, gpus: int) -> _Cluster:
    key = (job.key or id(job), job.cluster, gpus, job.config.dtype, job.engine_path)
    known = _CLUSTERS.get(key)
    if known is None:
        topology = load_topology(job.loader, job.cluster, gpus)
        device = gating_device(topology, job.config.dtype)
        path = choose_path(job.engine_path, topology)
        fast = path == "fast"
        price = fast_collective_model if fast else collective_model
        together = fast_concurrent_model if fast else concurrent_model
        known = _CLUSTERS[key] = _Cluster(
            topology,
            device,
            ComputeModel(device, job.config.dtype, job.calibration),
            path,
            price(topology, job.calibration),
            together(topology, job.calibration),
            is_mixed_devices(topology),
        )
    return known


def time_layout(job: PlanJob, gpus: int, layout: PlanLayout) -> Outcome:
    """Time one candidate (see the module docstring): the planner's only call into a step model."""
    if layout.fast_path:
        return _evaluate_data_parallel(job, gpus, layout)
    cluster = _cluster(job, gpus)
    config = replace(job.config, micro_batch=layout.micro_batch, activation_checkpointing=False)
    result = simulate_parallel_step(
        _workload(job), config, cluster.topology, layout.strategy, layout.parallel, layout.options,
        calibration=job.calibration, cluster=job.cluster, path=cluster.path, cache=cluster.compose,
        trace=False,
    )  # fmt: skip
    return Outcome(gpus, layout, result.report, path="parallel")


def _evaluate_data_parallel(job: PlanJob, gpus: int, layout: PlanLayout) -> Outcome:
    cluster = _cluster(job, gpus)
    config = replace(
        job.config, micro_batch=layout.micro_batch, activation_checkpointing=layout.recompute == "full"
    )
    ctx = replace(_context(job, cluster, config.micro_batch), config=config)
    slowdown = config.slowdown(job.calibration.comm_compute_slowdown if job.calibration else None)
    strategy = get_strategy(layout.strategy)
    device, peak = cluster.device.name, cluster.device.flops(config.dtype)
    # Mixed devices: every step waits for the slowest rank, as in the what-if.
    scale = None if not cluster.mixed else sync_compute_scale(
        cluster.topology, job.workload, config.dtype, config.micro_batch, NO_HETEROGENEITY,
        reference=device, recompute=config.activation_checkpointing, calibration=job.calibration,
    )  # fmt: skip
    if cluster.path == "fast" and scale is None:
        report = fast_step_report(
            strategy, ctx, cluster=job.cluster, device=device, peak_flops=peak, slowdown=slowdown,
            reuse=_probe_key(job, gpus, layout, config),
        )  # fmt: skip
    else:
        result = simulate_step(strategy, ctx, slowdown=slowdown, compute_scale=scale, path=cluster.path)
        report = report_step(result, ctx, cluster=job.cluster, device=device, peak_flops=peak)
    return Outcome(gpus, layout, report, path=cluster.path)


def _workload(job: PlanJob) -> Workload:
    """The process's one object equal to ``job.workload``."""
    known = _WORKLOAD_OF.get(id(job.workload))
    if known is not None and known[0] is job.workload:
        _WORKLOAD_OF.move_to_end(id(job.workload))
        return known[1]
    canonical = _WORKLOADS.setdefault(job.workload, job.workload)
    _WORKLOAD_OF[id(job.workload)] = (job.workload, canonical)
    while len(_WORKLOAD_OF) > WORKLOAD_CACHE_SIZE:
        _WORKLOAD_OF.popitem(last=False)
    return canonical


def _context(job: PlanJob, cluster: _Cluster, micro_batch: int) -> StepContext:
    """A context of ``job``'s workload on ``cluster`` at ``micro_batch``, for copies with each
    configuration: a copy shares its caches (per-layer and span times, tensor counts: pure functions
    of the workload, timer and micro-batch), so a sweep derives them once, not per configuration,
    and the placement (rank groups, NICs) is read off the topology once."""
    workload = _workload(job)
    key = (id(workload), id(cluster), micro_batch)
    known = _CONTEXTS.get(key)
    if known is not None and known[0] is workload and known[1] is cluster:
        _CONTEXTS.move_to_end(key)
        return known[2]
    config = replace(job.config, micro_batch=micro_batch)
    ctx = make_context(
        workload, config, cluster.topology, calibration=job.calibration, timer=cluster.timer,
        collective=cluster.collective, device_memory_bytes=cluster.device.memory_bytes,
        concurrent=cluster.concurrent,
    )  # fmt: skip
    _CONTEXTS[key] = (workload, cluster, ctx)
    while len(_CONTEXTS) > CONTEXT_CACHE_SIZE:
        _CONTEXTS.popitem(last=False)
    return ctx


def _probe_key(
    job: PlanJob, gpus: int, layout: PlanLayout, config: TrainingConfig
) -> tuple[object, ...] | None:
    """What a layout's step plan depends on besides the global batch: a sweep over batch sizes
    (one job per batch) then evaluates each long-accumulation probe once. None with a calibration
    profile (not compared by value)."""
    if job.calibration is not None:
        return None
    loader = (getattr(job.loader, "__module__", ""), getattr(job.loader, "__qualname__", repr(job.loader)))
    batchless = replace(config, global_batch=gpus * config.micro_batch)
    return (loader, job.cluster, gpus, job.engine_path, id(_workload(job)), batchless, layout)


def evaluate_tasks(job: PlanJob, tasks: Sequence[Task]) -> list[Outcome]:
    """Time every task, in order; a configuration the model refuses is an :class:`Outcome` with an error."""
    outcomes = []
    for gpus, layout in tasks:
        try:
            outcomes.append(time_layout(job, gpus, layout))
        except TrainsimError as exc:
            outcomes.append(Outcome(gpus, layout, None, str(exc)))
    return outcomes
