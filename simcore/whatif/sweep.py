"""The what-if: every (cluster, strategy, GPU count) point of a grid, and which strategy to pick.

:func:`run_what_if` simulates one step per point with :mod:`simcore.strategies` and returns
:class:`~simcore.report.StepReport` records with the scaling efficiency filled in against the same
strategy on one GPU of the same cluster; it is the one what-if driver, and given model-parallel
layouts it runs every (cluster, strategy, layout, GPU count) point instead
(:mod:`simcore.whatif.layouts`). :func:`recommend` applies the decision framework of
the seed study (M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025) to the largest GPU count of each cluster:

1. uneven hardware (mixed devices or stragglers) -> parameter server, when the simulated numbers
   say so (:func:`simcore.paramserver.advice.uneven_hardware_advice`); otherwise the synchronous
   choice below, with the parameter server's numbers that lost;
2. DDP fits -> DDP, unless another strategy that fits is more than :data:`DDP_TOLERANCE` faster
   (then that one, with the numbers that make it faster);
3. DDP does not fit -> the fastest strategy that fits, with its communication cost as the budget;
4. nothing fits -> the smallest peak and what to change.

Defaults (the main job, ``python -m experiments.what_if --gpus 16``): GPT-2 XL (1.56 B parameters,
sequence 1024, bf16 with fp32 master weights and AdamW, 16 bytes/parameter = 25 GB of model state:
it fits a replica on an 80 GB A100 but not on a 24 GB A10G, so the answer differs per cluster) on
the seed study's two cluster classes: ``dgx-a100`` (8 NVSwitch A100s per node) and ``g5.48xlarge``
(8 PCIe A10Gs per node). Both give 16 GPUs on 2 nodes, so the comparison changes the GPU and the
wires but not the node shape, as the paper's A100-vs-A10G comparison intends ("to isolate the
impact of communication bandwidth"). Global batch 64 and micro-batch 4 (one micro-batch per GPU at
16 GPUs; the one-GPU baseline accumulates 16).

Parameter-server modes (``ps-sync``, ``ps-async``, ``ps-ssp``, ``ps-mitigated``) are simulated per
rank with :mod:`simcore.paramserver` (flows through the cluster's links, so incast shows), for at
least :data:`MIN_PS_STEPS` steps (:data:`UNEVEN_PS_STEPS` on uneven or jittery hardware, where
asynchrony needs a few steps to settle). Stragglers, mixed devices and compute jitter
(:class:`simcore.compute.heterogeneity.Heterogeneity`) make every synchronous step wait for its slowest
rank; link jitter applies to the parameter server's flows only (collectives are priced
uncontended).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity, sync_compute_scale
from simcore.errors import TrainsimError
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.fastpath.path import DEFAULT_ENGINE_PATH, check_engine_path, choose_path
from simcore.fastpath.run import evaluate_step
from simcore.parallel.layout import ParallelLayout
from simcore.parallel.options import ParallelOptions
from simcore.paramserver import PS_MODES, PSConfig, load_ps_cluster, run_modes
from simcore.report import StepReport
from simcore.step.caches import StepCaches
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import Strategy, TrainingConfig
from simcore.strategies.runner import gating_device, make_context
from simcore.topology import ClusterLoader, Topology
from simcore.whatif.defaults import (
    DEFAULT_CLUSTERS,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_MICRO_BATCH,
    DEFAULT_MODEL,
    DEFAULT_SEQ_LEN,
    MIN_PS_STEPS,
    UNEVEN_PS_STEPS,
)
from simcore.whatif.layouts import run_layouts
from simcore.whatif.recommend import Recommendation, UnevenHardware, recommend
from simcore.whatif.result import WhatIfResult, counted_progress, gpu_counts, load_topologies

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.workload.types import Workload

__all__ = [
    "DEFAULT_CLUSTERS",
    "DEFAULT_CONFIG",
    "DEFAULT_MODEL",
    "MIN_PS_STEPS",
    "UNEVEN_PS_STEPS",
    "WhatIfResult",
    "all_strategy_names",
    "counted_progress",
    "gpu_counts",
    "load_topologies",
    "run_what_if",
]

DEFAULT_CONFIG = TrainingConfig(
    global_batch=DEFAULT_GLOBAL_BATCH, micro_batch=DEFAULT_MICRO_BATCH, seq_len=DEFAULT_SEQ_LEN, dtype="bf16",
    optimizer="adamw",
)  # fmt: skip


def all_strategy_names() -> list[str]:
    """Every strategy the what-if runs by default: the synchronous ones, then the parameter server's."""
    return [*strategy_names(), *PS_MODES]


def _check_names(names: Sequence[str]) -> tuple[list[Strategy], list[str]]:
    """(synchronous strategies, parameter-server modes) of ``names``, in the order given."""
    known = all_strategy_names()
    for name in names:
        if name not in known:
            raise TrainsimError(f"unknown strategy {name!r}; known: {', '.join(known)}")
    return [get_strategy(n) for n in names if n not in PS_MODES], [n for n in names if n in PS_MODES]


def run_what_if(
    workload: Workload,
    clusters: Sequence[str],
    gpus: Sequence[int],
    *,
    loader: ClusterLoader,
    strategies: Sequence[str] | None = None,
    config: TrainingConfig = DEFAULT_CONFIG,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    ps_options: PSConfig | None = None,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    engine_path: str = DEFAULT_ENGINE_PATH,
    layouts: Sequence[ParallelLayout] | None = None,
    options: ParallelOptions | None = None,
    keep_steps: bool = True,
) -> WhatIfResult:
    """Simulate every (cluster, strategy, gpus) point; reports are ordered cluster, strategy, gpus.

    ``layouts``: model-parallel layouts (with ``options``) to run every synchronous strategy over,
    each point a :class:`~simcore.parallel.report.ParallelStepReport` (:mod:`simcore.whatif.layouts`;
    reports ordered cluster, strategy, layout, gpus); None is pure data parallelism, the layout
    every point of the plain what-if has, with parameter servers and uneven hardware.

    ``loader`` builds each cluster by name (``topologies.load_cluster``). ``ps_options``: the
    parameter servers' shards, placement and staleness bound (each mode and its steps are set per
    point). ``engine_path`` (:mod:`simcore.fastpath.path`): ``auto`` evaluates synchronous
    strategies on the fast analytical path where every rank is alike, ``fast``/``des`` force one.
    """
    check_engine_path(engine_path)
    if layouts is not None and heterogeneity.describe() != "none":
        raise TrainsimError("stragglers and jitter are not modelled with parallel layouts")
    if layouts is not None:
        return run_layouts(
            workload, clusters, gpus, loader=loader, layouts=layouts, options=options or ParallelOptions(),
            strategies=strategies, config=config, calibration=calibration, seed=seed, progress=progress,
            engine_path=engine_path,
        )  # fmt: skip
    names = list(strategies) if strategies else all_strategy_names()
    chosen, ps_modes = _check_names(names)
    counts = gpu_counts(gpus)
    for count in counts:
        config.for_gpus(count).accumulation_steps(count)
    heterogeneity.check(counts[-1])
    result = WhatIfResult([], [], heterogeneity=heterogeneity)
    caches = StepCaches()  # what this run's points share, and nothing after it
    tick = counted_progress(len(clusters) * len(names) * (len(counts) + (1 not in counts)), progress)
    for cluster in clusters:
        topologies = load_topologies(result, cluster, counts, loader, calibration)
        by_point = _simulate_cluster(
            result, cluster, topologies, chosen, workload, config, calibration, seed, tick, heterogeneity,
            engine_path, caches, keep_steps,
        )  # fmt: skip
        if ps_modes:
            by_point.update(
                _simulate_ps_cluster(
                    result, cluster, topologies, ps_modes, workload, config, calibration, seed, tick,
                    ps_options or PSConfig(), heterogeneity, loader,
                )
            )  # fmt: skip
        _add_scaled(result, by_point, names, counts)
        result.recommendations.append(_recommend_point(result, cluster, counts[-1], topologies[counts[-1]]))
    return result


def _add_scaled(
    result: WhatIfResult,
    by_point: dict[tuple[str, int], StepReport],
    names: Sequence[str],
    counts: Sequence[int],
) -> None:
    """One cluster's reports, in order, with their scaling efficiency against one GPU."""
    for name in names:
        base = by_point[(name, 1)]
        for n in counts:
            rep = by_point[(name, n)]
            # n copies of the one-GPU baseline's rank, less what stragglers among the n take away
            efficiency = rep.samples_per_s / (result.heterogeneity.ideal_ranks(n) * base.samples_per_s)
            result.reports.append(replace(rep, scaling_efficiency=efficiency, baseline_fits=base.fits))


def _mean_samples_per_s(result: WhatIfResult, cluster: str, report: StepReport) -> float:
    """Throughput over all simulated steps (a straggler's slow steps count in full)."""
    ps = result.ps_results.get((cluster, report.strategy, report.gpus))
    if ps is not None:
        return ps.throughput_samples_per_s
    times = result.steps[(cluster, report.strategy, report.gpus)].step_times_s
    return report.global_batch / (math.fsum(times) / len(times))


def _recommend_point(result: WhatIfResult, cluster: str, gpus: int, topology: Topology) -> Recommendation:
    point = [r for r in result.reports if r.cluster == cluster and r.gpus == gpus]
    if not result.heterogeneity.uneven(topology):
        return recommend(point)
    ps = {r.strategy: result.ps_results[(cluster, r.strategy, gpus)] for r in point if r.strategy in PS_MODES}
    rates = {r.strategy: _mean_samples_per_s(result, cluster, r) for r in point}
    return recommend(
        point, heterogeneous=True, uneven=UnevenHardware(result.heterogeneity.why(topology), ps, rates)
    )


def _simulate_cluster(
    result: WhatIfResult,
    cluster: str,
    topologies: dict[int, Topology],
    chosen: Sequence[Strategy],
    workload: Workload,
    config: TrainingConfig,
    calibration: CalibrationProfile | None,
    seed: int,
    tick: Callable[[str], None],
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    engine_path: str = DEFAULT_ENGINE_PATH,
    caches: StepCaches | None = None,
    keep_steps: bool = True,
) -> dict[tuple[str, int], StepReport]:
    """Every synchronous strategy at every GPU count of one cluster (scaling efficiency not yet set);
    ``caches``: what the run's points share (FSDP units, folded copies); ``keep_steps``: as
    :func:`run_what_if` takes it.

    A step's compute waits for the slowest rank (devices, stragglers and jitter; see
    :func:`simcore.compute.heterogeneity.sync_compute_scale`).
    """
    slowdown = config.slowdown(calibration.comm_compute_slowdown if calibration else None)
    by_point: dict[tuple[str, int], StepReport] = {}
    for n, topo in sorted(topologies.items()):
        path = choose_path(engine_path, topo, heterogeneity.restricted(n))
        result.engine_paths[(cluster, n)] = path
        fast = path == "fast"
        ctx = make_context(
            workload, config.for_gpus(n), topo, calibration=calibration,
            collective=fast_collective_model(topo, calibration) if fast else None,
            concurrent=fast_concurrent_model(topo, calibration) if fast else None, caches=caches,
        )  # fmt: skip
        device = gating_device(topo, config.dtype)
        scale = sync_compute_scale(
            topo, workload, config.dtype, config.micro_batch, heterogeneity.restricted(n),
            reference=device.name, recompute=config.activation_checkpointing, calibration=calibration,
        )  # fmt: skip
        for strategy in chosen:
            # The simulated steps are kept where asked for (Chrome traces) and wherever they were
            # simulated (the mean rate of jittery steps reads them).
            evaluated = evaluate_step(
                strategy, ctx, path=path, slowdown=slowdown, compute_scale=scale, seed=seed, cluster=cluster,
                device=device.name, peak_flops=device.flops(config.dtype), trace=keep_steps,
            )  # fmt: skip
            by_point[(strategy.name, n)] = evaluated.report
            if evaluated.step is not None:
                result.steps[(cluster, strategy.name, n)] = evaluated.step
            tick(f"{cluster} {strategy.name} {n} GPUs")
    return by_point


def _simulate_ps_cluster(
    result: WhatIfResult,
    cluster: str,
    topologies: dict[int, Topology],
    modes: Sequence[str],
    workload: Workload,
    config: TrainingConfig,
    calibration: CalibrationProfile | None,
    seed: int,
    tick: Callable[[str], None],
    options: PSConfig,
    heterogeneity: Heterogeneity,
    loader: ClusterLoader,
) -> dict[tuple[str, int], StepReport]:
    """Every parameter-server mode at every GPU count of one cluster (per-rank simulation)."""
    by_point: dict[tuple[str, int], StepReport] = {}
    for n, topo in sorted(topologies.items()):
        uneven = heterogeneity.stochastic or heterogeneity.uneven(topo)
        steps = max(config.steps, UNEVEN_PS_STEPS if uneven else MIN_PS_STEPS)
        ps_topology = (
            topo
            if options.placement.kind == "colocated"
            else load_ps_cluster(cluster, n, options.placement, loader=loader)
        )
        results = run_modes(
            workload, config.for_gpus(n), ps_topology, modes, options, cluster=cluster, workers=n, steps=steps,
            heterogeneity=heterogeneity.restricted(n), calibration=calibration, seed=seed,
        )  # fmt: skip
        for mode, ps in results.items():
            by_point[(mode, n)] = ps.step
            result.ps_results[(cluster, mode, n)] = ps
            tick(f"{cluster} {mode} {n} GPUs")
    return by_point
