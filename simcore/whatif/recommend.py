"""Which strategy to pick at one (cluster, GPU count) point: the seed study's decision framework.

The framework (M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025), applied by :func:`recommend` to the reports of one point:

1. uneven hardware (mixed devices or stragglers) -> parameter server, when the simulated numbers
   say so (:func:`simcore.paramserver.advice.uneven_hardware_advice`); otherwise the synchronous
   choice below, with the parameter server's numbers that lost;
2. DDP fits -> DDP, unless another strategy that fits is more than :data:`DDP_TOLERANCE` faster
   (then that one, with the numbers that make it faster);
3. DDP does not fit -> the fastest strategy that fits, with its communication cost as the budget;
4. nothing fits -> the smallest peak and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from simcore.errors import TrainsimError
from simcore.paramserver.advice import uneven_hardware_advice
from simcore.paramserver.config import PS_MODES
from simcore.paramserver.report import PSResult
from simcore.report import StepReport

__all__ = ["DDP_TOLERANCE", "Recommendation", "UnevenHardware", "recommend"]

# DDP is kept when it is within this fraction of the fastest strategy that fits: the seed study's
# author's advice, "if the model fits, use DDP" (simplest, no sharding round trips), unless the
# numbers disagree.
DDP_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The strategy to use on one cluster at one GPU count, and why (one or two lines)."""

    cluster: str
    gpus: int
    strategy: str | None
    rule: str  # "heterogeneous" | "heterogeneous-synchronous" | "ddp-fits" | "faster-than-ddp" | "sharded-fits" | "nothing-fits"
    reason: str

    def to_record(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "gpus": self.gpus,
            "strategy": self.strategy,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class UnevenHardware:
    """Why a point's hardware is uneven, and what the uneven-hardware branch compares."""

    why: str
    ps_results: Mapping[str, PSResult]
    mean_samples_per_s: Mapping[str, float]


def _gb(n: float) -> str:
    """Memory in GiB, as nvidia-smi and vendors' "80GB" cards mean it (80 GiB)."""
    return f"{n / 2**30:.1f} GiB"


def _why_faster(best: StepReport, ddp: StepReport) -> str:
    compute_gain = ddp.compute_s - best.compute_s
    comm_gain = ddp.exposed_comm_s - best.exposed_comm_s
    if compute_gain >= comm_gain:
        impl = f" ({ddp.optimizer_impl} on DDP's full replica)" if ddp.optimizer_impl else ""
        return f"its sharded optimizer update{impl} saves {compute_gain * 1e3:.0f} ms of compute per step"
    return f"it exposes {comm_gain * 1e3:.0f} ms less communication per step"


def recommend(
    reports: Sequence[StepReport], *, heterogeneous: bool = False, uneven: UnevenHardware | None = None
) -> Recommendation:
    """The decision framework applied to the reports of one (cluster, gpus) point.

    Rules 2-4 choose among the synchronous strategies (parameter-server modes only when nothing
    else was run). On uneven hardware (``heterogeneous``, or ``uneven`` with the parameter
    server's results) the fastest parameter server is weighed against that choice first.
    """
    if not reports:
        raise TrainsimError("no reports to recommend from")
    ps_names = set(uneven.ps_results) if uneven is not None else set()
    synchronous = [r for r in reports if r.strategy not in ps_names and r.strategy not in PS_MODES] or list(
        reports
    )
    if not heterogeneous and uneven is None:
        return _synchronous_choice(synchronous)
    chosen = _synchronous_choice(synchronous)
    verdict = None
    if uneven is not None:
        verdict = uneven_hardware_advice(reports, uneven.ps_results, uneven.mean_samples_per_s, uneven.why)
    if verdict is not None and verdict.ps_wins:
        return Recommendation(
            reports[0].cluster, reports[0].gpus, verdict.strategy, "heterogeneous", verdict.reason
        )
    if verdict is not None:
        note = verdict.reason[0].upper() + verdict.reason[1:] + " "
    elif uneven is not None and uneven.ps_results:
        # parameter-server modes ran, but none fits in memory: say so (not "none was simulated")
        modes = ", ".join(sorted(uneven.ps_results))
        note = (
            f"Uneven hardware: every synchronous strategy waits for the slowest GPU ({reports[0].device}); "
            f"the parameter-server modes simulated ({modes}) do not fit in memory. "
        )
    else:
        note = (
            f"Uneven hardware: every synchronous strategy waits for the slowest GPU ({reports[0].device}); "
            "no parameter-server mode was simulated (add ps-async to --strategies). "
        )
    return replace(chosen, rule="heterogeneous-synchronous", reason=note + chosen.reason)


def _assumed(*reports: StepReport | None) -> str:
    """What the compared steps assumed: each strategy's precision mode and optimizer implementation."""
    parts = list(
        dict.fromkeys(
            f"{r.strategy} {r.precision.split(' (')[0]} with the {r.optimizer_impl} optimizer"
            for r in reports
            if r is not None and r.precision
        )
    )
    return f" Assumed: {'; '.join(parts)}." if parts else ""


def _synchronous_choice(reports: Sequence[StepReport]) -> Recommendation:
    """Rules 2-4 of the framework, with what the compared steps assumed."""
    choice = _synchronous_rules(reports)
    ddp = next((r for r in reports if r.strategy == "ddp"), None)
    chosen = next((r for r in reports if r.strategy == choice.strategy), None)
    return replace(choice, reason=choice.reason + _assumed(chosen, ddp))


def _synchronous_rules(reports: Sequence[StepReport]) -> Recommendation:
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
