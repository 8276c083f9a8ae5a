"""The claims of the seed study and of the hardware article against the simulator, claim by claim.

The study: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.
The article: "Understanding Distributed Training Strategies and Hardware Effects".

    python -m experiments.reproduce_paper                 # the full setting (tens of seconds)
    python -m experiments.reproduce_paper --quick         # the CI setting (a few seconds)
    python -m experiments.reproduce_paper --format markdown --out report/

Simulates the paper's setting (an A100 cluster and an A10G cluster, its CNNs on CIFAR-10; DDP, FSDP,
synchronous and asynchronous parameter servers and the staleness-mitigating variant) and the
article's hardware comparisons (:mod:`experiments.reproduce_paper.hardware`), then prints, per claim
of :mod:`experiments.reproduce_paper.claims`, what the source states, what the simulator predicts,
the verdict the claim's rule computes from those numbers, and the assumptions behind the row. Where
the simulator disagrees the table says so; nothing here is tuned to agree. The report's text (table,
markdown, JSON) is rendered by :mod:`experiments.reproduce_paper.report`.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from experiments.common.progress import track
from experiments.reproduce_paper.args import build_parser
from experiments.reproduce_paper.claims import (
    CLAIMS,
    FULL_SETTING,
    QUICK_SETTING,
    ClaimResult,
    PaperSetting,
)
from experiments.reproduce_paper.hardware import (
    HARDWARE_EVALUATORS,
    cached_cluster,
    cached_workload,
    simulate_point,
)
from experiments.reproduce_paper.region import RegionSweep, claim_regions, format_regions
from experiments.reproduce_paper.report import FORMATS, SUFFIX, render
from simcore.cliargs import output_dir
from simcore.compute.heterogeneity import Heterogeneity, Jitter, JitterSpec
from simcore.errors import cli_entry
from simcore.output import write_text_atomic
from simcore.paramserver import (
    PSConfig,
    PSResult,
    load_ps_cluster,
    parse_placement,
    simulate_parameter_server,
    summarise,
)
from simcore.staleness.penalty import estimate_accuracy_penalty
from simcore.strategies.base import TrainingConfig
from topologies import load_cluster, mixed_cluster

if TYPE_CHECKING:
    from simcore.report import StepReport

__all__ = ["PS_MODES_USED", "build_parser", "main", "paper_claims", "render", "run_claims"]

PS_MODES_USED = ("ps-sync", "ps-async", "ps-mitigated")


def paper_config(setting: PaperSetting, workers: int) -> TrainingConfig:
    """One micro-batch per GPU per step, ``workers`` GPUs; tensor-only peak memory."""
    return TrainingConfig(
        global_batch=setting.micro_batch * workers,
        micro_batch=setting.micro_batch,
        dtype=setting.dtype,
        optimizer=setting.optimizer,
        allocator_overhead_bytes=0,
    )


@cache
def _step(setting: PaperSetting, cluster: str, model: str, strategy: str, gpus: int) -> StepReport:
    """``strategy`` on ``gpus`` GPUs of ``cluster``; the global batch is the setting's, so one GPU accumulates."""
    config = paper_config(setting, setting.gpus)
    return simulate_point(
        cached_workload(model), config, cached_cluster(cluster, gpus), strategy, cluster, seed=setting.seed
    )


def _clusters(setting: PaperSetting) -> tuple[str, str]:
    return setting.a100_cluster, setting.a10g_cluster


def _spread(values: Sequence[float], fmt: str = "{:.2f}x") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return (
        f"median {fmt.format(statistics.median(values))} "
        f"(range {fmt.format(min(values))} to {fmt.format(max(values))}, {len(values)} points)"
    )


def _ratio_claim(claim_id: str, pairs: dict[str, tuple[float, float]], what: str) -> ClaimResult:
    ratios = {label: a / b for label, (a, b) in pairs.items()}
    details = [f"{label}: {a:,.0f} vs {b:,.0f} {what} = {a / b:.2f}x" for label, (a, b) in pairs.items()]
    return ClaimResult.judged(
        claim_id, _spread(list(ratios.values())), list(ratios.values()), list(ratios), details
    )


def _pairs(
    setting: PaperSetting,
    first: tuple[str, int],
    second: tuple[str, int],
    metric: str,
    clusters: Sequence[str],
) -> dict[str, tuple[float, float]]:
    """{"cluster model": (metric of (strategy, gpus) ``first``, the same of ``second``)} per model."""
    return {
        f"{c} {m}": (
            getattr(_step(setting, c, m, *first), metric),
            getattr(_step(setting, c, m, *second), metric),
        )
        for c in clusters
        for m in setting.models
    }


def evaluate_ddp_vs_fsdp(setting: PaperSetting) -> ClaimResult:
    """DDP samples/s over FSDP samples/s, per cluster and model."""
    pairs = _pairs(
        setting, ("ddp", setting.gpus), ("fsdp", setting.gpus), "samples_per_s", _clusters(setting)
    )
    return _ratio_claim("ddp-vs-fsdp", pairs, "samples/s")


def evaluate_ddp_vs_one_gpu(setting: PaperSetting) -> ClaimResult:
    """DDP on the setting's GPUs over one GPU with the same global batch; 2 and 4 GPUs in the details."""
    pairs = _pairs(setting, ("ddp", setting.gpus), ("ddp", 1), "samples_per_s", _clusters(setting))
    result = _ratio_claim("ddp-vs-1gpu", pairs, "samples/s")
    extra = []
    for n in [n for n in (2, 4) if n < setting.gpus and setting.gpus % n == 0]:
        fewer = _pairs(setting, ("ddp", n), ("ddp", 1), "samples_per_s", _clusters(setting))
        extra.append(f"on {n} GPUs the speedup would be {_spread([a / b for a, b in fewer.values()])}")
    predicted = f"{result.predicted} on {setting.gpus} GPUs"
    return replace(result, predicted=predicted, details=(*result.details, *extra))


def evaluate_fsdp_memory(setting: PaperSetting) -> ClaimResult:
    """DDP peak over FSDP peak per GPU, per model (the peak does not depend on the wires)."""
    cluster = setting.a100_cluster
    pairs = _pairs(setting, ("ddp", setting.gpus), ("fsdp", setting.gpus), "peak_memory_bytes", (cluster,))
    ratios = [a / b for a, b in pairs.values()]
    details = []
    for label, (a, b) in pairs.items():
        model = label.split(" ", 1)[1]
        activations = _step(setting, cluster, model, "ddp", setting.gpus).memory_breakdown["activations"]
        details.append(
            f"{model} ({cached_workload(model).params / 1e6:.0f} M params): DDP {a / 1e9:.2f} GB, FSDP "
            f"{b / 1e9:.2f} GB = {a / b:.2f}x (activations {activations / 1e9:.2f} GB)"
        )
    counts = sorted({2, 4, setting.gpus, 2 * setting.gpus})
    for m in setting.models:
        by_count = ", ".join(f"{n} GPUs {_memory_ratio(setting, m, n):.2f}x" for n in counts)
        details.append(f"{m} DDP/FSDP peak by GPU count: {by_count}")
    predicted = f"{_spread(ratios)} on {setting.gpus} GPUs"
    return ClaimResult.judged("fsdp-memory", predicted, ratios, list(pairs), details)


def _memory_ratio(setting: PaperSetting, model: str, gpus: int) -> float:
    """DDP peak / FSDP peak per GPU on ``gpus`` GPUs of the A100 cluster, one micro-batch per GPU."""
    config = paper_config(setting, gpus)
    topology = cached_cluster(setting.a100_cluster, gpus)
    peaks = [
        simulate_point(cached_workload(model), config, topology, s, "", seed=setting.seed).peak_memory_bytes
        for s in ("ddp", "fsdp")
    ]
    return peaks[0] / peaks[1]


# --- parameter servers -----------------------------------------------------------------------------


def _heterogeneity(setting: PaperSetting, condition: str) -> Heterogeneity:
    if condition.endswith("-jitter"):
        return Heterogeneity(jitter=JitterSpec(compute=Jitter("lognormal", setting.jitter_sigma)))
    return Heterogeneity()


@cache
def _ps_run(setting: PaperSetting, model: str, condition: str, mode: str) -> PSResult:
    """One parameter-server run of ``model`` under ``condition`` (see PaperSetting.ps_conditions)."""
    ps = PSConfig(mode=mode, placement=parse_placement(setting.ps_placement), steps=setting.ps_steps)
    if condition == "mixed":  # one server of each class as workers, an A100 server for the shards
        topology = mixed_cluster(
            [(setting.a100_cluster, 1), (setting.a10g_cluster, 1), (setting.a100_cluster, 1)]
        )
        workers = len(topology.ranks_on_host(0)) + len(topology.ranks_on_host(1))
    else:
        cluster = setting.a100_cluster if condition.startswith("a100") else setting.a10g_cluster
        topology = load_ps_cluster(cluster, setting.gpus, ps.placement, loader=load_cluster)
        workers = setting.gpus
    outcome = simulate_parameter_server(
        cached_workload(model),
        paper_config(setting, workers),
        topology,
        ps,
        workers=workers,
        heterogeneity=_heterogeneity(setting, condition),
        seed=setting.seed,
    )
    return summarise(outcome, cluster=condition)


def _ps_time(setting: PaperSetting, model: str, condition: str, mode: str) -> float:
    """Seconds per sample over the run: the same samples take this x samples in every mode."""
    return 1.0 / _ps_run(setting, model, condition, mode).throughput_samples_per_s


def _less_time(cut: float) -> str:
    return f"{cut:.0%} less time" if cut >= 0 else f"{-cut:.0%} more time"


def _ps_points(setting: PaperSetting) -> list[tuple[str, str]]:
    return [(m, c) for m in setting.ps_models for c in setting.ps_conditions]


def evaluate_ddp_vs_ps(setting: PaperSetting) -> ClaimResult:
    """DDP samples/s over synchronous-PS samples/s on each homogeneous cluster."""
    pairs = {}
    for cluster, condition in zip(_clusters(setting), ("a100", "a10g"), strict=True):
        for m in setting.ps_models:
            sync = _ps_run(setting, m, condition, "ps-sync").throughput_samples_per_s
            pairs[f"{cluster} {m}"] = (_step(setting, cluster, m, "ddp", setting.gpus).samples_per_s, sync)
    return _ratio_claim("ddp-vs-ps", pairs, "samples/s")


def evaluate_async_time(setting: PaperSetting) -> ClaimResult:
    """1 - T(async) / T(sync) per model and condition."""
    cuts, labels, details = [], [], []
    for m, c in _ps_points(setting):
        sync, fast = _ps_time(setting, m, c, "ps-sync"), _ps_time(setting, m, c, "ps-async")
        cuts.append(1 - fast / sync)
        labels.append(f"{m} {c}")
        details.append(
            f"{m} {c}: sync {1 / sync:,.0f}, async {1 / fast:,.0f} samples/s: {_less_time(1 - fast / sync)}"
        )
    best = max(range(len(cuts)), key=lambda i: cuts[i])
    predicted = f"up to {cuts[best]:.0%} less time ({labels[best]}); {_spread(cuts, '{:.0%}')}"
    return ClaimResult.judged("async-time", predicted, cuts, labels, details)


def evaluate_async_accuracy(setting: PaperSetting) -> ClaimResult:
    """Estimated accuracy points lost to the asynchronous runs' staleness."""
    points, labels, details = [], [], []
    for m, c in _ps_points(setting):
        stale = _ps_run(setting, m, c, "ps-async").staleness
        estimate = estimate_accuracy_penalty(stale["mean"], stale["p99"])
        points.append(estimate["penalty_points"])
        labels.append(f"{m} {c}")
        details.append(
            f"{m} {c}: staleness mean {stale['mean']:.1f}, p99 {stale['p99']:.0f} -> "
            f"{estimate['penalty_points']:.1f} points{' (extrapolated)' if estimate['extrapolated'] else ''}"
        )
    return ClaimResult.judged(
        "async-accuracy", f"{_spread(points, '{:.1f} points')} (estimate)", points, labels, details
    )


def evaluate_mitigated(setting: PaperSetting) -> ClaimResult:
    """Share of the asynchronous gain the mitigating protocol keeps, where there was a gain."""
    kept, labels, details = [], [], []
    for m, c in _ps_points(setting):
        sync, fast, mitigated = (_ps_time(setting, m, c, mode) for mode in PS_MODES_USED)
        run = _ps_run(setting, m, c, "ps-mitigated")
        line = (
            f"{m} {c}: sync {1 / sync:,.0f}, async {1 / fast:,.0f}, mitigated {1 / mitigated:,.0f} samples/s, "
            f"{run.recomputes} recomputes"
        )
        if 1 - fast / sync < setting.ps_gain_floor:
            details.append(f"{line}; async gained < {setting.ps_gain_floor:.0%}: not judged")
            continue
        share = (sync - mitigated) / (sync - fast)
        kept.append(share)
        labels.append(f"{m} {c}")
        details.append(f"{line}; keeps {share:.0%} of the async gain")
    predicted = (
        f"mitigated keeps {_spread(kept, '{:.0%}')} of the async gain"
        if kept
        else "async gained nothing to negate in any condition"
    )
    return ClaimResult.judged("mitigated-negates", predicted, kept, labels, details)


PS_CLAIMS = ("ddp-vs-ps", "async-time", "async-accuracy", "mitigated-negates")
Evaluator = Callable[[PaperSetting], ClaimResult]
PAPER_EVALUATORS: tuple[Evaluator, ...] = (
    evaluate_ddp_vs_fsdp,
    evaluate_ddp_vs_one_gpu,
    evaluate_fsdp_memory,
)
PS_EVALUATORS: tuple[Evaluator, ...] = (
    evaluate_ddp_vs_ps, evaluate_async_time, evaluate_async_accuracy, evaluate_mitigated,
)  # fmt: skip


def _ps_evaluators() -> list[Evaluator]:
    """The parameter-server claims' evaluators, or ones that say why they were not simulated."""
    return list(PS_EVALUATORS)


def _evaluate(evaluators: Sequence[Evaluator], setting: PaperSetting, quiet: bool) -> list[ClaimResult]:
    return [
        evaluate(setting)
        for evaluate in track(evaluators, len(evaluators), "claims", quiet=quiet, unit="claim")
    ]


def _paper_order(results: Sequence[ClaimResult]) -> list[ClaimResult]:
    by_id = {r.claim_id: r for r in results}
    return [by_id[c] for c in CLAIMS if c in by_id]


def paper_claims(setting: PaperSetting, *, quiet: bool = True) -> list[ClaimResult]:
    """The seed study's claims, in table order."""
    return _paper_order(_evaluate([*PAPER_EVALUATORS, *_ps_evaluators()], setting, quiet))


def run_claims(setting: PaperSetting, *, quiet: bool = True) -> list[ClaimResult]:
    """Every claim of both sources, the study first (a progress bar on stderr unless ``quiet``)."""
    paper = [*PAPER_EVALUATORS, *_ps_evaluators()]
    results = _evaluate([*paper, *HARDWARE_EVALUATORS], setting, quiet)
    return [*_paper_order(results[: len(paper)]), *results[len(paper) :]]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = output_dir(args.out, force=args.force)
    setting = QUICK_SETTING if args.quick else FULL_SETTING
    results = run_claims(setting, quiet=args.quiet)
    print(render(results, setting, args.format, quick=args.quick), end="")
    if args.regions:
        sweep = RegionSweep(gpus=(2, 4, 8)) if args.quick else RegionSweep()
        print("\n" + format_regions(claim_regions(setting, sweep, _step), setting, sweep), end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for fmt in FORMATS:
            path = out / f"reproduce_paper.{SUFFIX[fmt]}"
            write_text_atomic(path, render(results, setting, fmt, quick=args.quick))
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
