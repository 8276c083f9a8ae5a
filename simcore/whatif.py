"""The what-if: every (cluster, strategy, GPU count) point of a grid, and which strategy to pick.

:func:`run_what_if` simulates one step per point with :mod:`simcore.strategies` and returns
:class:`~simcore.report.StepReport` records with the scaling efficiency filled in against the same
strategy on one GPU of the same cluster. :func:`recommend` applies the seed paper's decision
framework to the largest GPU count of each cluster:

1. uneven hardware -> parameter server (the branch issue 4 adds: :data:`HETEROGENEOUS_RULE`);
2. DDP fits -> DDP, unless another strategy that fits is more than :data:`DDP_TOLERANCE` faster
   (then that one, with the numbers that make it faster);
3. DDP does not fit -> the fastest strategy that fits, with its communication cost as the budget;
4. nothing fits -> the smallest peak and what to change.

Defaults (the main job, ``python -m experiments.what_if --gpus 16``): GPT-2 XL (1.56 B parameters,
sequence 1024, bf16 with fp32 master weights and AdamW, 16 bytes/parameter = 25 GB of model state:
it fits a replica on an 80 GB A100 but not on a 24 GB A10G, so the answer differs per cluster) on
the seed paper's two cluster classes: ``dgx-a100`` (8 NVSwitch A100s per node) and ``g5.48xlarge``
(8 PCIe A10Gs per node). Both give 16 GPUs on 2 nodes, so the comparison changes the GPU and the
wires but not the node shape, as the paper's A100-vs-A10G comparison intends ("to isolate the
impact of communication bandwidth"). Global batch 64 and micro-batch 4 (one micro-batch per GPU at
16 GPUs; the one-GPU baseline accumulates 16).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError
from simcore.report import StepReport
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import Strategy, TrainingConfig
from simcore.strategies.runner import StepResult, gating_device, make_context, report_step, simulate_step
from simcore.topology import Topology

if TYPE_CHECKING:
    from simcore.calibration import CalibrationProfile
    from simcore.workload import Workload

__all__ = [
    "DDP_TOLERANCE",
    "DEFAULT_CLUSTERS",
    "DEFAULT_CONFIG",
    "DEFAULT_MODEL",
    "HETEROGENEOUS_RULE",
    "Recommendation",
    "WhatIfResult",
    "recommend",
    "run_what_if",
]

DEFAULT_MODEL = "gpt2-xl"
DEFAULT_SEQ_LEN = 1024
DEFAULT_CLUSTERS = ("dgx-a100", "g5.48xlarge")
DEFAULT_CONFIG = TrainingConfig(
    global_batch=64, micro_batch=4, seq_len=DEFAULT_SEQ_LEN, dtype="bf16", optimizer="adamw"
)
# DDP is kept when it is within this fraction of the fastest strategy that fits: the seed notes'
# "if the model fits, use DDP" (simplest, no sharding round trips) unless the numbers disagree.
DDP_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The strategy to use on one cluster at one GPU count, and why (one or two lines)."""

    cluster: str
    gpus: int
    strategy: str | None
    rule: str  # "heterogeneous" | "ddp-fits" | "faster-than-ddp" | "sharded-fits" | "nothing-fits"
    reason: str

    def to_record(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "gpus": self.gpus,
            "strategy": self.strategy,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass(slots=True)
class WhatIfResult:
    """Reports of every point, a recommendation per cluster, and the simulated steps (for traces)."""

    reports: list[StepReport]
    recommendations: list[Recommendation]
    steps: dict[tuple[str, str, int], StepResult] = field(default_factory=dict)
    topologies: dict[tuple[str, int], Topology] = field(default_factory=dict)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _heterogeneous_not_yet(reports: Sequence[StepReport]) -> Recommendation | None:
    """Issue 4 replaces this with the parameter-server branch; until then, no opinion."""
    return None


# The uneven-hardware branch of the decision framework: called first when a cluster mixes devices.
HETEROGENEOUS_RULE: Callable[[Sequence[StepReport]], Recommendation | None] = _heterogeneous_not_yet


def _why_faster(best: StepReport, ddp: StepReport) -> str:
    compute_gain = ddp.compute_s - best.compute_s
    comm_gain = ddp.exposed_comm_s - best.exposed_comm_s
    if compute_gain >= comm_gain:
        return f"its sharded optimizer update saves {compute_gain * 1e3:.0f} ms of compute per step"
    return f"it exposes {comm_gain * 1e3:.0f} ms less communication per step"


def recommend(reports: Sequence[StepReport], *, heterogeneous: bool = False) -> Recommendation:
    """The decision framework applied to the reports of one (cluster, gpus) point."""
    if not reports:
        raise TrainsimError("no reports to recommend from")
    if heterogeneous:
        verdict = HETEROGENEOUS_RULE(reports)
        if verdict is not None:
            return verdict
        chosen = _synchronous_choice(reports)
        note = (
            f"Uneven hardware: every synchronous strategy waits for the slowest GPU ({reports[0].device}); "
            "the parameter-server alternative is not simulated yet. "
        )
        return replace(chosen, rule="heterogeneous-synchronous", reason=note + chosen.reason)
    return _synchronous_choice(reports)


def _synchronous_choice(reports: Sequence[StepReport]) -> Recommendation:
    """Rules 2-4 of the framework (homogeneous, gang-scheduled data parallelism)."""
    cluster, gpus = reports[0].cluster, reports[0].gpus
    fitting = sorted((r for r in reports if r.fits), key=lambda r: (r.step_time_s, r.strategy))
    ddp = next((r for r in reports if r.strategy == "ddp"), None)
    if not fitting:
        least = min(reports, key=lambda r: (r.peak_memory_bytes, r.strategy))
        return Recommendation(
            cluster,
            gpus,
            None,
            "nothing-fits",
            f"nothing fits: the smallest peak is {least.strategy} at {_gb(least.peak_memory_bytes)} "
            f"> {_gb(least.memory_capacity_bytes)}; try --checkpoint-activations, a smaller "
            "--micro-batch or more GPUs",
        )
    best = fitting[0]
    if ddp is not None and ddp.fits:
        return _when_ddp_fits(ddp, best, fitting)
    need = f"DDP needs {_gb(ddp.peak_memory_bytes)} > {_gb(ddp.memory_capacity_bytes)}; " if ddp else ""
    share = best.exposed_comm_s / best.step_time_s if best.step_time_s else 0.0
    return Recommendation(
        cluster,
        gpus,
        best.strategy,
        "sharded-fits",
        f"{need}{best.strategy} is the fastest that fits (peak {_gb(best.peak_memory_bytes)}, "
        f"{best.samples_per_s:.1f} samples/s). Communication budget: {best.exposed_comm_s * 1e3:.0f} ms "
        f"exposed per step ({share * 100:.0f}% of the step), {_gb(best.comm_bytes)} of collectives per GPU.",
    )


def _when_ddp_fits(ddp: StepReport, best: StepReport, fitting: Sequence[StepReport]) -> Recommendation:
    """Rule 2: DDP, unless a strategy that fits is more than DDP_TOLERANCE faster."""
    if ddp.step_time_s > best.step_time_s * (1 + DDP_TOLERANCE):
        gain = ddp.step_time_s / best.step_time_s - 1
        return Recommendation(
            ddp.cluster,
            ddp.gpus,
            best.strategy,
            "faster-than-ddp",
            f"DDP fits but {best.strategy} is {gain * 100:.1f}% faster ({best.samples_per_s:.1f} vs "
            f"{ddp.samples_per_s:.1f} samples/s): {_why_faster(best, ddp)}.",
        )
    others = [r for r in fitting if r.strategy != "ddp"]
    lead = ""
    if others:
        margin = others[0].step_time_s / ddp.step_time_s - 1
        relation = "ahead of" if margin >= 0 else "behind"
        lead = f", {abs(margin) * 100:.1f}% {relation} {others[0].strategy} ({others[0].samples_per_s:.1f} samples/s)"
    return Recommendation(
        ddp.cluster,
        ddp.gpus,
        "ddp",
        "ddp-fits",
        f"DDP fits (peak {_gb(ddp.peak_memory_bytes)} of {_gb(ddp.memory_capacity_bytes)}) "
        f"and runs {ddp.samples_per_s:.1f} samples/s{lead}; if it fits, use DDP.",
    )


def _is_heterogeneous(topology: Topology) -> bool:
    return len({topology.gpu_spec_name(r) for r in range(topology.world_size)}) > 1


def run_what_if(
    workload: Workload,
    clusters: Sequence[str],
    gpus: Sequence[int],
    *,
    strategies: Sequence[str] | None = None,
    config: TrainingConfig = DEFAULT_CONFIG,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> WhatIfResult:
    """Simulate every (cluster, strategy, gpus) point; reports are ordered cluster, strategy, gpus."""
    from topologies import load_cluster

    names = list(strategies) if strategies else strategy_names()
    chosen = [get_strategy(n) for n in names]
    counts = sorted(set(gpus))
    if not counts or counts[0] < 1:
        raise TrainsimError(f"--gpus must list positive counts, got {list(gpus)}")
    for count in counts:
        config.accumulation_steps(count)
    result = WhatIfResult([], [])
    total, done = len(clusters) * len(names) * (len(counts) + (1 not in counts)), [0]

    def tick(line: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(f"[{done[0]}/{total}] {line}")

    for cluster in clusters:
        topologies = {n: load_cluster(cluster, gpus=n) for n in sorted({1, *counts})}
        result.topologies.update({(cluster, n): t for n, t in topologies.items()})
        if calibration is not None:
            calibration.check_against(topologies[counts[-1]], strict=False)
        by_point = _simulate_cluster(
            result, cluster, topologies, chosen, workload, config, calibration, seed, tick
        )
        for strategy in chosen:
            base = by_point[(strategy.name, 1)]
            for n in counts:
                rep = by_point[(strategy.name, n)]
                efficiency = rep.samples_per_s / (n * base.samples_per_s)
                result.reports.append(replace(rep, scaling_efficiency=efficiency, baseline_fits=base.fits))
        point = [r for r in result.reports if r.cluster == cluster and r.gpus == counts[-1]]
        result.recommendations.append(
            recommend(point, heterogeneous=_is_heterogeneous(topologies[counts[-1]]))
        )
    return result


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
) -> dict[tuple[str, int], StepReport]:
    """One step of every strategy at every GPU count of one cluster (scaling efficiency not yet set)."""
    slowdown = config.slowdown(calibration.comm_compute_slowdown if calibration else None)
    by_point: dict[tuple[str, int], StepReport] = {}
    for n, topo in sorted(topologies.items()):
        ctx = make_context(workload, config, topo, calibration=calibration)
        device = gating_device(topo, config.dtype)
        for strategy in chosen:
            step = simulate_step(strategy, ctx, seed=seed, slowdown=slowdown)
            by_point[(strategy.name, n)] = report_step(
                step, ctx, cluster=cluster, device=device.name, peak_flops=device.flops(config.dtype)
            )
            result.steps[(cluster, strategy.name, n)] = step
            tick(f"{cluster} {strategy.name} {n} GPUs")
    return by_point
