"""Time one layout on one GPU count: the work a planner sweep hands to its workers.

A :class:`PlanJob` holds what every configuration of a sweep shares (the workload, the cluster and
how to load it, the base training configuration, a calibration profile, the engine path); a task
is a (GPU count, :class:`~simcore.planner.space.PlanLayout`) pair. :func:`time_layout` is the one
place a candidate is timed: pure data parallelism (no selective or every-K recompute, no offload)
through the step seam (:func:`simcore.fastpath.run.evaluate_step`), every other layout by
:func:`simcore.parallel.step.simulate_parallel_step`. :func:`evaluate_tasks` runs a batch of tasks in one process and is
what a process pool or a Ray task calls: clusters, device timers, collective costs, contexts and
step caches are kept in a :class:`WorkerCaches`, so a worker that gets many tasks of one GPU count
loads and prices that cluster once.

Whoever runs tasks owns the :class:`WorkerCaches` they share: a benchmark passes its own; a sweep's
worker processes use the process's one (:func:`worker_caches`), made by the local pool's
initializer or by the first task a process runs (in process, or a Ray worker), and inherited by
forked workers with whatever the parent had loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simcore.compute.fp8 import compute_model, weight_cast_microbatches
from simcore.compute.heterogeneity import NO_HETEROGENEITY, is_mixed_devices, sync_compute_scale
from simcore.compute.rank_spread import spread_ranks
from simcore.errors import TrainsimError
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.fastpath.path import DEFAULT_ENGINE_PATH, check_engine_path, choose_path
from simcore.fastpath.run import evaluate_step
from simcore.parallel.cache import ComposeCache
from simcore.parallel.step import simulate_parallel_step
from simcore.planner.space import PlanLayout
from simcore.report import StepReport
from simcore.step.caches import Recent, StepCaches
from simcore.strategies import get_strategy
from simcore.strategies.base import CollectiveFn, ConcurrentFn, LayerTimer, StepContext, TrainingConfig
from simcore.strategies.runner import collective_model, concurrent_model, gating_device, make_context
from simcore.topology import ClusterLoader, Topology

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Workload

__all__ = [
    "Outcome",
    "PlanJob",
    "Task",
    "WorkerCaches",
    "evaluate_tasks",
    "install_worker_caches",
    "load_topology",
    "time_layout",
    "worker_caches",
]


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
    path: str
    collective: CollectiveFn
    concurrent: ConcurrentFn  # same-shape groups priced together (HSDP's replicate groups)
    mixed: bool  # more than one device type: each step waits for the slowest rank
    ranks: int  # the ranks the step's compute waits for (rank spread)
    # compute models by the micro-batches a step's FP8 weight casts are spread over
    # (:func:`~simcore.compute.fp8.weight_cast_microbatches`: 1 but for a once-per-step cast)
    timers: dict[int, LayerTimer] = field(default_factory=dict)

    def timer(self, job: PlanJob, microbatches: int) -> LayerTimer:
        """The compute model of a step of ``microbatches`` micro-batches, as the what-if builds it
        (:func:`simcore.strategies.runner.make_context`): a once-per-step FP8 weight cast is spread
        over the step's micro-batches, not paid by each."""
        casts = weight_cast_microbatches(job.config.fp8, microbatches)
        known = self.timers.get(casts)
        if known is None:
            config = job.config
            known = self.timers[casts] = compute_model(
                self.device, config.dtype, job.calibration, config.fp8, compiled=config.compile,
                software_era=config.software_era, microbatches=casts, power_limit_w=config.power_limit_w,
                ranks=self.ranks,
            )  # fmt: skip
        return known


CONTEXT_CACHE_SIZE = 64  # a context's caches hold per-layer and span times (kilobytes)
WORKLOAD_CACHE_SIZE = 16


@dataclass(slots=True, eq=False)
class WorkerCaches:
    """What the tasks one worker times share (see the module docstring).

    ``clusters``: (job, cluster, gpus, dtype, engine path) -> the loaded cluster; ``topologies``:
    (loader, cluster, gpus) -> the topology; ``contexts``: (workload, cluster, micro-batch) -> a
    context to copy (keyed by identity, the objects kept); ``workloads``: one object per distinct
    workload (by value), and ``workload_of`` the last few objects seen with theirs (a job arrives
    unpickled afresh with each chunk of tasks), so caches keyed on the one object's identity serve
    every chunk without hashing a workload per configuration; ``steps``: the step caches every
    context of this worker carries; ``compose``: what composed (model-parallel) steps share, on
    every cluster size of the worker (a pipeline stage's sharded layers and their compute times do
    not depend on the GPU count; what does is keyed by its topology)."""

    clusters: dict[tuple[object, ...], _Cluster] = field(default_factory=dict)
    topologies: dict[tuple[object, ...], Topology] = field(default_factory=dict)
    contexts: Recent[StepContext] = field(default_factory=lambda: Recent(CONTEXT_CACHE_SIZE))
    workloads: dict[Workload, Workload] = field(default_factory=dict)
    workload_of: Recent[Workload] = field(default_factory=lambda: Recent(WORKLOAD_CACHE_SIZE))
    steps: StepCaches = field(default_factory=StepCaches)
    compose: ComposeCache = field(default_factory=ComposeCache)


# The process's own WorkerCaches: None until the pool's initializer or the first task here makes it
# (install_worker_caches / worker_caches); a slot, not a cache: what it holds is an owned object.
_WORKER: WorkerCaches | None = None


def install_worker_caches() -> WorkerCaches:
    """Make this process's :class:`WorkerCaches` if it has none (a pool worker's initializer)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = WorkerCaches()
    return _WORKER


def worker_caches() -> WorkerCaches:
    """This process's :class:`WorkerCaches`, made on first use."""
    return _WORKER if _WORKER is not None else install_worker_caches()


def load_topology(
    loader: ClusterLoader, cluster: str, gpus: int, caches: WorkerCaches | None = None
) -> Topology:
    """``loader(cluster, gpus=gpus)``, once per ``caches`` (None: the process's own, which a pool's
    forked workers inherit)."""
    caches = caches if caches is not None else worker_caches()
    key = (getattr(loader, "__module__", ""), getattr(loader, "__qualname__", repr(loader)), cluster, gpus)
    topology = caches.topologies.get(key)
    if topology is None:
        topology = caches.topologies[key] = loader(cluster, gpus=gpus)
    return topology


def _cluster(job: PlanJob, gpus: int, caches: WorkerCaches) -> _Cluster:
    key = (
        job.key or id(job),
        job.cluster,
        gpus,
        job.config.dtype,
        job.config.compile,
        job.config.software_era,
        job.config.power_limit_w,
        job.config.rank_spread,
        job.engine_path,
    )
    known = caches.clusters.get(key)
    if known is None:
        topology = load_topology(job.loader, job.cluster, gpus, caches)
        device = gating_device(topology, job.config.dtype)
        path = choose_path(job.engine_path, topology)
        fast = path == "fast"
        price = fast_collective_model if fast else collective_model
        together = fast_concurrent_model if fast else concurrent_model
        known = caches.clusters[key] = _Cluster(
            topology,
            device,
            path,
            price(topology, job.calibration),
            together(topology, job.calibration),
            is_mixed_devices(topology),
            spread_ranks(
                job.config.rank_spread,
                topology.world_size,
                explicit_speeds=job.config.compute_jitter_sigma > 0 or is_mixed_devices(topology),
            ),
        )
    return known


def time_layout(job: PlanJob, gpus: int, layout: PlanLayout, caches: WorkerCaches | None = None) -> Outcome:
    """Time one candidate (see the module docstring): the planner's only call into a step model.

    ``caches``: what this candidate shares with the others timed here (None: the process's own)."""
    caches = caches if caches is not None else worker_caches()
    if layout.fast_path:
        return _evaluate_data_parallel(job, gpus, layout, caches)
    cluster = _cluster(job, gpus, caches)
    config = replace(job.config, micro_batch=layout.micro_batch, activation_checkpointing=False)
    result = simulate_parallel_step(
        _workload(job, caches), config, cluster.topology, layout.strategy, layout.parallel, layout.options,
        calibration=job.calibration, cluster=job.cluster, path=cluster.path, cache=caches.compose,
        trace=False,
    )  # fmt: skip
    return Outcome(gpus, layout, result.report, path="parallel")


def _evaluate_data_parallel(job: PlanJob, gpus: int, layout: PlanLayout, caches: WorkerCaches) -> Outcome:
    cluster = _cluster(job, gpus, caches)
    config = replace(
        job.config, micro_batch=layout.micro_batch, activation_checkpointing=layout.recompute == "full"
    )
    ctx = replace(_context(job, cluster, config, caches), config=config)
    slowdown = config.slowdown(job.calibration.comm_compute_slowdown if job.calibration else None)
    strategy = get_strategy(layout.strategy)
    device, peak = cluster.device.name, cluster.device.flops(config.dtype)
    # Mixed devices: every step waits for the slowest rank, as in the what-if.
    scale = None if not cluster.mixed else sync_compute_scale(
        cluster.topology, job.workload, config.dtype, config.micro_batch, NO_HETEROGENEITY,
        reference=device, recompute=config.activation_checkpointing, calibration=job.calibration,
    )  # fmt: skip
    report = evaluate_step(
        strategy, ctx, path=cluster.path, slowdown=slowdown, compute_scale=scale, cluster=job.cluster,
        device=device, peak_flops=peak, reuse=_probe_key(job, gpus, layout, config, caches),
    ).report  # fmt: skip
    return Outcome(gpus, layout, report, path=cluster.path)


def _workload(job: PlanJob, caches: WorkerCaches) -> Workload:
    """The worker's one object equal to ``job.workload``."""
    return caches.workload_of.of(
        job.workload, (), lambda: caches.workloads.setdefault(job.workload, job.workload)
    )


def _context(job: PlanJob, cluster: _Cluster, config: TrainingConfig, caches: WorkerCaches) -> StepContext:
    """A context of ``job``'s workload on ``cluster`` at ``config``'s micro-batch, for copies with each
    configuration: a copy shares its caches (per-layer and span times, tensor counts: pure functions
    of the workload, timer and micro-batch), so a sweep derives them once, not per configuration,
    and the placement (rank groups, NICs) is read off the topology once. Its timer is the compute
    model of ``config``'s step (the micro-batches an FP8 weight cast is spread over)."""
    workload = _workload(job, caches)
    micro_batch = config.micro_batch
    timer = cluster.timer(job, config.accumulation_steps(cluster.topology.world_size))
    config = replace(job.config, micro_batch=micro_batch)
    # (a cluster stays in caches.clusters as long as the caches live, so its id is not reused;
    # its timers stay in it as well)
    return caches.contexts.of(
        workload,
        (id(cluster), micro_batch, id(timer)),
        lambda: make_context(
            workload, config, cluster.topology, calibration=job.calibration, timer=timer,
            collective=cluster.collective, device_memory_bytes=cluster.device.memory_bytes,
            concurrent=cluster.concurrent, caches=caches.steps,
        ),
    )  # fmt: skip


def _probe_key(
    job: PlanJob, gpus: int, layout: PlanLayout, config: TrainingConfig, caches: WorkerCaches
) -> tuple[object, ...] | None:
    """What a layout's step plan depends on besides the global batch: a sweep over batch sizes
    (one job per batch) then evaluates each long-accumulation probe once. None with a calibration
    profile (not compared by value)."""
    if job.calibration is not None:
        return None
    loader = (getattr(job.loader, "__module__", ""), getattr(job.loader, "__qualname__", repr(job.loader)))
    batchless = replace(config, global_batch=gpus * config.micro_batch)
    return (loader, job.cluster, gpus, job.engine_path, id(_workload(job, caches)), batchless, layout)


def evaluate_tasks(job: PlanJob, tasks: Sequence[Task], caches: WorkerCaches | None = None) -> list[Outcome]:
    """Time every task, in order; a configuration the model refuses is an :class:`Outcome` with an
    error. ``caches``: what the tasks share (None: the process's own, :func:`worker_caches`)."""
    caches = caches if caches is not None else worker_caches()
    outcomes = []
    for gpus, layout in tasks:
        try:
            outcomes.append(time_layout(job, gpus, layout, caches))
        except TrainsimError as exc:
            outcomes.append(Outcome(gpus, layout, None, str(exc)))
    return outcomes
