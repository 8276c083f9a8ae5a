"""Summaries, verdicts and the report of the staleness-to-accuracy study.

Accuracy penalty is in accuracy percentage points against the synchronous (zero-staleness) setting,
mean over seeds. Time to target = server updates until test accuracy first reaches the target,
times the simulated (or given) time per update of the setting's parameter-server mode.

The seed study the report compares with: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from experiments.staleness_accuracy.plots import write_plots
from experiments.staleness_accuracy.trainer import SettingResult

# numpy is imported inside the functions that use it, so --help does not load it.

__all__ = [
    "PAPER_ASYNC_PENALTY_PCT",
    "PAPER_ASYNC_TIME_SAVING",
    "ReportContext",
    "StepTimes",
    "SummaryRow",
    "format_table",
    "format_verdicts",
    "markdown_report",
    "paper_comparison",
    "summarize",
    "verdict",
    "write_plots",
]

# Seed paper (unified DDP/FSDP/PS evaluation, abstract): asynchronous PS "reduced training time by up
# to 28%" and "incurred accuracy penalties (ranging from 4% to 17%)"; the staleness-mitigating
# protocol's "synchronization overheads ... negated throughput gains".
PAPER_ASYNC_TIME_SAVING = 0.28
PAPER_ASYNC_PENALTY_PCT = (4.0, 17.0)
PLOT_NAMES = ("accuracy_curves", "penalty_vs_staleness", "time_to_accuracy")


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Time per server update, its unit (``s`` or relative) and where it comes from (the time basis).

    ``per_update`` holds one time per mode; ``per_setting`` times for particular settings (by name),
    which take precedence: SSP at each bound, say, has its own simulated time. ``source`` states the
    basis in full, ``label`` in a few words.
    """

    per_update: Mapping[str, float] = field(default_factory=dict)
    unit: str = "s"
    source: str = ""
    per_setting: Mapping[str, float] = field(default_factory=dict)
    label: str = ""

    def of(self, mode: str) -> float | None:
        return self.per_update.get(mode)

    def for_setting(self, name: str, mode: str) -> float | None:
        """The setting's own time if it has one, else its mode's."""
        return self.per_setting.get(name, self.per_update.get(mode))


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """One line of the results table (accuracy as a fraction, penalty in percentage points)."""

    name: str
    family: str
    mode: str
    mean_staleness: float
    p99_staleness: int
    accuracy_mean: float
    accuracy_std: float
    penalty_points: float
    seeds: int
    reached: int
    diverged: int
    updates_to_target: float | None  # mean over the seeds that reached the target
    epochs_to_target: float | None
    time_per_update: float | None
    time_to_target: float | None


def _to_target(result: SettingResult, target: float) -> tuple[int, float | None, float | None]:
    """How many seeds reached ``target``, and their mean updates and epochs to reach it."""
    import numpy as np

    hits = [u for run in result.runs if (u := run.updates_to_reach(target)) is not None]
    if not hits:
        return 0, None, None
    per_epoch = result.runs[0].updates_per_epoch
    mean_updates = float(np.mean(hits))
    return len(hits), mean_updates, mean_updates / per_epoch


def summarize(
    results: Sequence[SettingResult], sync_accuracy: float, target: float, step_times: StepTimes
) -> list[SummaryRow]:
    """One :class:`SummaryRow` per setting, in the given order."""
    import numpy as np

    rows = []
    for result in results:
        accuracies = result.final_accuracies
        std = float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else 0.0
        reached, updates, epochs = _to_target(result, target)
        per_update = step_times.for_setting(result.setting.name, result.setting.mode)
        time_to_target = updates * per_update if updates is not None and per_update is not None else None
        dist = result.setting.distribution
        rows.append(
            SummaryRow(
                name=result.setting.name,
                family=result.setting.family,
                mode=result.setting.mode,
                mean_staleness=dist.mean,
                p99_staleness=dist.p99,
                accuracy_mean=float(np.mean(accuracies)),
                accuracy_std=std,
                penalty_points=100.0 * (sync_accuracy - float(np.mean(accuracies))),
                seeds=len(result.runs),
                reached=reached,
                diverged=sum(run.diverged for run in result.runs),
                updates_to_target=updates,
                epochs_to_target=epochs,
                time_per_update=per_update,
                time_to_target=time_to_target,
            )
        )
    return rows


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: Sequence[SummaryRow], target: float, step_times: StepTimes) -> str:
    """The results table as aligned text (what the CLI prints)."""
    header = (
        f"{'setting':<24} {'mode':<9} {'mean_s':>6} {'p99_s':>5} {'final acc':>15} {'penalty':>8} "
        f"{'reached':>7} {'updates':>7} {'epochs':>6} {'t/update':>8} {'time':>9}"
    )
    lines = [
        f"target accuracy {target:.3f}; penalty in accuracy points vs sync; time unit: {step_times.unit}",
        header,
        "-" * len(header),
    ]
    for row in rows:
        accuracy = f"{row.accuracy_mean:.3f} ± {row.accuracy_std:.3f}"
        lines.append(
            f"{row.name:<24} {row.mode:<9} {row.mean_staleness:>6.2f} {row.p99_staleness:>5d} {accuracy:>15} "
            f"{row.penalty_points:>+8.2f} {f'{row.reached}/{row.seeds}':>7} "
            f"{_number(row.updates_to_target, '.0f'):>7} {_number(row.epochs_to_target, '.1f'):>6} "
            f"{_number(row.time_per_update, '.3g'):>8} {_number(row.time_to_target, '.4g'):>9}"
        )
    return "\n".join(lines)


def verdict(row: SummaryRow, sync: SummaryRow) -> str:
    """The combined judgement of a setting against sync: per step, to accuracy, and final accuracy."""
    if row.time_per_update is None or sync.time_per_update is None:
        per_step = "step time unknown"
    elif math.isclose(row.time_per_update, sync.time_per_update, rel_tol=1e-9):
        per_step = "same per step"
    else:
        per_step = "faster per step" if row.time_per_update < sync.time_per_update else "slower per step"
    if row.reached < row.seeds:
        to_accuracy = f"misses target ({row.reached}/{row.seeds} seeds)"
    elif row.time_to_target is None or sync.time_to_target is None:
        to_accuracy = "time to accuracy unknown"
    elif math.isclose(row.time_to_target, sync.time_to_target, rel_tol=1e-9):
        to_accuracy = "same to accuracy"
    else:
        to_accuracy = (
            "faster to accuracy" if row.time_to_target < sync.time_to_target else "slower to accuracy"
        )
    if per_step == "faster per step" and to_accuracy == "faster to accuracy":
        combined = "both better"
    elif per_step == "slower per step" and to_accuracy.startswith(("slower", "misses")):
        combined = "both worse"
    else:
        combined = f"{per_step}, {to_accuracy}"
    return f"{combined}; final accuracy {0.0 - row.penalty_points:+.2f} pts"


def _verdict_groups(rows: Sequence[SummaryRow], cluster: str) -> list[tuple[str, list[SummaryRow]]]:
    """(heading, rows): the simulated PS modes of ``cluster`` if any, then the other non-sync settings."""
    predicted = [row for row in rows if row.family == "predicted"]
    others = [row for row in rows if row.family not in ("sync", "predicted")]
    if not predicted:
        return [("verdict against sync", others)]
    groups = [(f"verdict per PS mode on {cluster or 'the chosen cluster'} against sync", predicted)]
    return groups + ([("verdict of the other settings against sync", others)] if others else [])


def format_verdicts(rows: Sequence[SummaryRow], cluster: str = "") -> str:
    """One verdict line per non-sync setting; the simulated PS modes of ``cluster`` in a block of their own."""
    sync = next(row for row in rows if row.family == "sync")
    lines = []
    for heading, group in _verdict_groups(rows, cluster):
        lines.append(f"{heading}:")
        lines += [f"  {row.name:<24} {verdict(row, sync)}" for row in group]
    return "\n".join(lines)


def _range(values: Sequence[float], spec: str) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return format(low, spec) if math.isclose(low, high) else f"{format(low, spec)} to {format(high, spec)}"


def paper_comparison(rows: Sequence[SummaryRow], step_times: StepTimes) -> list[tuple[str, str, str]]:
    """(quantity, seed study, this study) lines: the seed study's headline figures beside ours."""
    sync = next(row for row in rows if row.family == "sync")
    stale_async = [r for r in rows if r.mode in ("async", "ssp") and r.mean_staleness > 0]
    mitigated = [r for r in rows if r.mode == "mitigated"]
    ours_time = "step times unknown"
    if sync.time_per_update and sync.time_to_target and step_times.of("async") is not None:
        saving = 1.0 - step_times.per_update["async"] / sync.time_per_update
        to_target = [
            1.0 - r.time_to_target / sync.time_to_target
            for r in stale_async
            if r.time_to_target and r.reached == r.seeds
        ]
        ours_time = (
            f"{saving:.0%} per update ({step_times.label or step_times.source}); time to target accuracy saved "
            f"{_range(to_target, '+.0%') if to_target else '-'} (negative: slower; "
            f"{len(to_target)}/{len(stale_async)} settings reach it)"
        )
    relative = [r.penalty_points / sync.accuracy_mean for r in stale_async]  # points / fraction = percent
    return [
        ("async PS training-time saving", f"up to {PAPER_ASYNC_TIME_SAVING:.0%}", ours_time),
        (
            "async accuracy penalty",
            f"{PAPER_ASYNC_PENALTY_PCT[0]:.0f}% to {PAPER_ASYNC_PENALTY_PCT[1]:.0f}%",
            f"{_range([r.penalty_points for r in stale_async], '.1f')} pts "
            f"({_range(relative, '.1f')}% relative), mean staleness "
            f"{_range([r.mean_staleness for r in stale_async], '.1f')}",
        ),
        (
            "staleness-mitigating protocol",
            "synchronisation overhead negated the throughput gain",
            f"penalty {_range([r.penalty_points for r in mitigated], '.1f')} pts; "
            f"{sum(r.reached == r.seeds for r in mitigated)}/{len(mitigated)} settings reach the target",
        ),
    ]


@dataclass(frozen=True, slots=True)
class ReportContext:
    """What the markdown report says about how the numbers were made."""

    command: str
    dataset: str
    why_dataset: str
    model: str
    target: float
    step_times: StepTimes
    notes: tuple[str, ...] = ()
    cluster: str = ""  # "dgx-a100, 8 GPUs" when (b) ran


def _markdown_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return out


def _markdown_verdicts(rows: Sequence[SummaryRow], sync: SummaryRow, cluster: str) -> list[str]:
    """The verdict sections: the simulated PS modes of the cluster first, then the other settings."""
    text: list[str] = []
    for heading, group in _verdict_groups(rows, cluster):
        text += [""] if text else []
        text += [
            f"## {heading[0].upper()}{heading[1:]}",
            *(f"- **{r.name}**: {verdict(r, sync)}" for r in group),
        ]
    return text


def markdown_report(rows: Sequence[SummaryRow], context: ReportContext) -> str:
    """The full report as markdown: setup, results, verdicts, the seed study beside ours, notes."""
    sync = next(row for row in rows if row.family == "sync")
    results = [
        [
            r.name,
            r.mode,
            f"{r.mean_staleness:.2f}",
            str(r.p99_staleness),
            f"{r.accuracy_mean:.3f} ± {r.accuracy_std:.3f}",
            f"{r.penalty_points:+.2f}",
            f"{r.reached}/{r.seeds}",
            _number(r.epochs_to_target, ".1f"),
            _number(r.time_per_update, ".3g"),
            _number(r.time_to_target, ".4g"),
        ]
        for r in rows
    ]
    text = [
        "# Staleness to accuracy: what stale gradients cost, and time to accuracy",
        "",
        f"Command: `{context.command}`",
        "",
        "## Setup",
        f"- Data: {context.dataset}. Why: {context.why_dataset}.",
        f"- Model and training: {context.model}",
        "- Method: the server applies one minibatch gradient per update, computed on the parameters of "
        "`d` updates earlier (a ring buffer of past versions), `d` drawn per update from the setting's "
        "staleness distribution; `mitigated` damps the step to lr / (1 + d) (Zhang et al. 2016, "
        "staleness-aware async SGD). Zero staleness is plain synchronous SGD, bit for bit.",
        f"- Target accuracy: {context.target:.3f}.",
        f"- Time basis (time per update, {context.step_times.unit}): {context.step_times.source}.",
        "",
        "## Results (mean ± std over seeds; penalty in accuracy points against sync)",
        *_markdown_table(
            [
                "setting",
                "mode",
                "mean staleness",
                "p99",
                "final accuracy",
                "penalty",
                "reached",
                "epochs",
                f"time/update ({context.step_times.unit})",
                "time to target",
            ],
            results,
        ),
        "",
        *_markdown_verdicts(rows, sync, context.cluster),
        "",
        "## The seed study beside this one",
        "",
        'M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A Quantitative'
        ' Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters", arXiv 2505.12832, 2025.',
        "",
        *_markdown_table(
            ["quantity", "seed study", "this study"],
            [list(x) for x in paper_comparison(rows, context.step_times)],
        ),
        "",
        "The paper's penalties come from its own (larger) models and training recipe; ours from a small MLP"
        " whose penalty depends strongly on learning rate and staleness. Compare the shape, not the digits.",
    ]
    if context.notes:
        text += ["", "## Notes", *[f"- {note}" for note in context.notes]]
    text += ["", "## Plots", *[f"![{name}]({name}.png)" for name in PLOT_NAMES]]
    return "\n".join(text) + "\n"
