"""Ranking timed layouts: budgets, the best layout per GPU count and why, and the Pareto frontiers.

Throughput is tokens/s for language models and samples/s otherwise. Within a GPU count, layouts
that fit are ranked by throughput (ties: less memory, then the label). Across GPU counts, the
frontier of throughput vs GPUs keeps each count whose best beats every smaller count's; with a
price per GPU-hour, the frontier of throughput vs cost keeps each best that no other beats on
both throughput and cost per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcore.errors import TrainsimError
from simcore.planner.space import PlanLayout
from simcore.report import StepReport

__all__ = [
    "Budget",
    "Ranked",
    "cost_frontier",
    "deciding_factor",
    "explain_winner",
    "gpu_frontier",
    "price",
    "rank",
    "step_components",
    "throughput",
    "within_budget",
]

GiB = 2**30


@dataclass(frozen=True, slots=True)
class Budget:
    """Memory headroom, and the training run a time or cost budget applies to.

    ``headroom_bytes`` and ``headroom_fraction`` (of the device's memory) are kept free.
    ``max_hours``/``max_cost`` need the run's length (``train_tokens`` or ``train_samples``);
    ``max_cost`` and cost reports need ``price_per_gpu_hour``.
    """

    headroom_bytes: float = 0.0
    headroom_fraction: float = 0.0
    train_tokens: float | None = None
    train_samples: float | None = None
    max_hours: float | None = None
    max_cost: float | None = None
    price_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        if self.headroom_bytes < 0 or not 0 <= self.headroom_fraction < 1:
            raise TrainsimError(
                "--memory-headroom must be >= 0 bytes or a fraction in [0, 1), e.g. 10% or 4GiB"
            )
        for name in ("train_tokens", "train_samples", "max_hours", "max_cost", "price_per_gpu_hour"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise TrainsimError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if self.train_tokens is not None and self.train_samples is not None:
            raise TrainsimError("give --train-tokens or --train-samples, not both")
        if (self.max_hours or self.max_cost) and self.train_tokens is None and self.train_samples is None:
            raise TrainsimError(
                "--max-hours and --max-cost need the length of the run: give --train-tokens or --train-samples"
            )
        if self.max_cost is not None and self.price_per_gpu_hour is None:
            raise TrainsimError("--max-cost needs --price-per-gpu-hour to turn GPU-hours into money")

    def usable_bytes(self, capacity_bytes: float) -> float:
        return capacity_bytes * (1.0 - self.headroom_fraction) - self.headroom_bytes

    def check_language_model(self, tokens_per_sample: int) -> None:
        if self.train_tokens is not None and not tokens_per_sample:
            raise TrainsimError("--train-tokens needs a language model; use --train-samples for this model")


def throughput(report: StepReport) -> float:
    """Tokens/s for language models, samples/s otherwise."""
    return report.tokens_per_s if report.tokens_per_s is not None else report.samples_per_s


@dataclass(frozen=True, slots=True)
class Ranked:
    """A layout that fits, its report and, with a budget, the training run's hours and cost."""

    gpus: int
    layout: PlanLayout
    report: StepReport
    hours: float | None = None
    cost: float | None = None
    cost_per_million: float | None = None  # per million tokens (samples for vision models)

    @property
    def label(self) -> str:
        """The layout's name at this GPU count (:meth:`PlanLayout.label`)."""
        return self.layout.label(self.gpus)

    def to_record(self) -> dict[str, object]:
        """The what-if record of the step, plus the layout and the run's time and cost."""
        record = self.report.to_record()
        record["layout"] = self.layout.to_record(self.gpus)
        record["train_hours"] = self.hours
        record["train_cost"] = self.cost
        record["cost_per_million"] = self.cost_per_million
        return record


def price(gpus: int, layout: PlanLayout, report: StepReport, budget: Budget) -> Ranked:
    """The run's hours and cost under ``budget`` (None where it gives no length or price)."""
    hours = None
    if budget.train_tokens is not None and report.tokens_per_s:
        hours = budget.train_tokens / report.tokens_per_s / 3600.0
    elif budget.train_samples is not None and report.samples_per_s > 0:
        hours = budget.train_samples / report.samples_per_s / 3600.0
    per_hour = gpus * budget.price_per_gpu_hour if budget.price_per_gpu_hour is not None else None
    cost = hours * per_hour if hours is not None and per_hour is not None else None
    rate = throughput(report)
    per_million = per_hour / 3600.0 / rate * 1e6 if per_hour is not None and rate > 0 else None
    return Ranked(gpus, layout, report, hours, cost, per_million)


def within_budget(ranked: Ranked, budget: Budget) -> bool:
    if budget.max_hours is not None and ranked.hours is not None and ranked.hours > budget.max_hours:
        return False
    return not (budget.max_cost is not None and ranked.cost is not None and ranked.cost > budget.max_cost)


def rank(layouts: Sequence[Ranked]) -> list[Ranked]:
    """Fastest first; ties to the smaller peak memory, then the label."""
    return sorted(layouts, key=lambda r: (-throughput(r.report), r.report.peak_memory_bytes, r.label))


def gpu_frontier(bests: Sequence[Ranked]) -> list[Ranked]:
    """The best layouts whose throughput beats every smaller GPU count's best."""
    frontier: list[Ranked] = []
    for best in sorted(bests, key=lambda r: r.gpus):
        if not frontier or throughput(best.report) > throughput(frontier[-1].report):
            frontier.append(best)
    return frontier


def cost_frontier(bests: Sequence[Ranked]) -> list[Ranked]:
    """The best layouts no other beats on both throughput and cost per million (empty without a price)."""
    priced = [r for r in bests if r.cost_per_million is not None]
    frontier = []
    for r in priced:
        dominated = any(
            throughput(o.report) >= throughput(r.report)
            and (o.cost_per_million or 0.0) <= (r.cost_per_million or 0.0)
            and (
                throughput(o.report) > throughput(r.report)
                or (o.cost_per_million or 0.0) < (r.cost_per_million or 0.0)
            )
            for o in priced
        )
        if not dominated:
            frontier.append(r)
    return sorted(frontier, key=lambda r: r.gpus)


def step_components(report: StepReport) -> dict[str, float]:
    """Seconds per step of compute (the busiest GPU's passes), pipeline bubble (its idle share of
    the step) and exposed communication (what is left of the step beyond both)."""
    bubble = float(getattr(report, "pipeline_bubble_fraction", 0.0)) * report.step_time_s
    return {
        "compute": report.compute_s,
        "pipeline bubble": bubble,
        "exposed communication": max(0.0, report.step_time_s - report.compute_s - bubble),
    }


def deciding_factor(best: Ranked, other: Ranked) -> str:
    """Why ``best`` is faster than ``other``: the component of the step it saves most on, with both
    values (``"pipeline bubble 0.120 s vs 0.310 s"``)."""
    mine, theirs = step_components(best.report), step_components(other.report)
    factor = max(mine, key=lambda k: (theirs[k] - mine[k], k == "compute"))
    return f"{factor} {mine[factor]:.3f} s vs {theirs[factor]:.3f} s per step"


def explain_winner(
    ranked: Sequence[Ranked], no_fit: Sequence[str], capacity_bytes: float, best_dp: Ranked | None = None
) -> str:
    """Why the first layout wins: against the runner-up and the best pure data-parallel layout
    (``best_dp``; None: none fits, so memory decides), naming the deciding factor among compute,
    pipeline bubble, exposed communication and memory; and the strategies that cannot fit."""
    best = ranked[0]
    r = best.report
    unit = "tokens/s" if r.tokens_per_s is not None else "samples/s"
    parts = [f"{best.label} is the fastest of {len(ranked)} layout(s) that fit"]
    runner = ranked[1] if len(ranked) > 1 else None
    if runner is not None:
        who = "the runner-up" + (" (the best pure data-parallel layout)" if runner is best_dp else "")
        parts.append(_versus(best, runner, who, unit))
    if not best.layout.pure_data_parallel:
        if best_dp is None:
            parts.append("memory: no pure data-parallel layout fits")
        elif best_dp is not runner:
            parts.append(_versus(best, best_dp, "the best pure data-parallel layout", unit))
    parts.append(f"peak {r.peak_memory_bytes / GiB:.1f} of {capacity_bytes / GiB:.1f} GiB")
    if no_fit:
        parts.append(f"{', '.join(no_fit)} never fit here")
    return "; ".join(parts)


def _versus(best: Ranked, other: Ranked, who: str, unit: str) -> str:
    rate = throughput(other.report)
    ratio = throughput(best.report) / rate if rate > 0 else float("inf")
    return f"{ratio:.2f}x the {unit} of {who} {other.label} (deciding: {deciding_factor(best, other)})"
