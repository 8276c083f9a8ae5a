"""The memory comparison's rows and how they are reported: table, summary, markdown and plots.

A :class:`ComparisonRow` is one configuration of ``python -m experiments.validate_memory`` with its
measured and predicted peak and categories; :func:`format_table`, :func:`summary`,
:func:`markdown_report` and :func:`write_plots` render a list of them (the names are re-exported by
:mod:`experiments.validate_memory`). The goal is the peak within :data:`PEAK_GOAL` (5 %).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simcore.output import save_figure

__all__ = [
    "CATEGORIES",
    "PEAK_GOAL",
    "ComparisonRow",
    "format_table",
    "markdown_report",
    "summary",
    "write_plots",
]

PEAK_GOAL = 0.05
CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers", "temp")
MB = 1e6


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One configuration: measured and predicted peak bytes and per-category bytes at each peak."""

    model: str
    strategy: str
    world_size: int
    source: str  # simulator workload: "import" (the measured module traced) or "preset"
    measured_peak: float
    predicted_peak: float
    measured: Mapping[str, float]
    predicted: Mapping[str, float]
    measured_phase: str
    predicted_phase: str
    measured_forward_activations: float | None = None  # tracker, at the end of forward (loss included)
    predicted_forward_activations: float | None = None  # workload: saved activation bytes x batch

    @property
    def forward_activation_error(self) -> float | None:
        """Relative error of the activations held at the end of forward, None if not measured."""
        if not self.measured_forward_activations or self.predicted_forward_activations is None:
            return None
        return self.predicted_forward_activations / self.measured_forward_activations - 1.0

    @property
    def peak_error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_peak / self.measured_peak - 1.0

    def category_error(self, category: str) -> float | None:
        """Relative error of one category, None where nothing was measured in it."""
        measured = self.measured.get(category, 0.0)
        if measured <= 0:
            return None
        return self.predicted.get(category, 0.0) / measured - 1.0

    def contribution(self, category: str) -> float:
        """(predicted - measured) bytes of one category as a fraction of the measured peak."""
        return (self.predicted.get(category, 0.0) - self.measured.get(category, 0.0)) / self.measured_peak


def _mb(value: float) -> str:
    return f"{value / MB:.4g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def _table_cells(rows: Sequence[ComparisonRow]) -> tuple[list[str], list[list[str]]]:
    header = ["model", "strategy", "W", "source", "peak meas MB", "peak pred MB", "peak err", "goal"]
    header += [f"{c} meas/pred MB (d/peak)" for c in CATEGORIES]
    header += ["fwd act meas/pred MB (err)"]
    body = []
    for row in rows:
        cells = [
            row.model,
            row.strategy,
            str(row.world_size),
            row.source,
            _mb(row.measured_peak),
            _mb(row.predicted_peak),
            _pct(row.peak_error),
            "ok" if abs(row.peak_error) <= PEAK_GOAL else "MISS",
        ]
        cells += [
            f"{_mb(row.measured[c])}/{_mb(row.predicted[c])} ({_pct(row.contribution(c))})"
            for c in CATEGORIES
        ]
        forward = row.measured_forward_activations
        cells.append(
            "n/a"
            if forward is None
            else f"{_mb(forward)}/{_mb(row.predicted_forward_activations or 0.0)} "
            f"({_pct(row.forward_activation_error)})"
        )
        body.append(cells)
    return header, body


def format_table(rows: Sequence[ComparisonRow]) -> str:
    """The comparison as an aligned text table (MB = 1e6 bytes), one line per configuration."""
    header, body = _table_cells(rows)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i < 4 else cell.rjust(widths[i]) for i, cell in enumerate(r)
        ).rstrip()
        for r in [header, *body]
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def summary(rows: Sequence[ComparisonRow]) -> dict[str, dict[str, float]]:
    """Per source: configurations, how many meet the goal, peak MAPE, max |error|, mean contributions."""
    out: dict[str, dict[str, float]] = {}
    for source in dict.fromkeys(r.source for r in rows):
        chosen = [r for r in rows if r.source == source]
        errors = [abs(r.peak_error) for r in chosen]
        stats = {
            "configurations": float(len(chosen)),
            "within_goal": float(sum(e <= PEAK_GOAL for e in errors)),
            "peak_mape": math.fsum(errors) / len(errors),
            "peak_max_abs_error": max(errors),
        }
        forward = [abs(e) for r in chosen if (e := r.forward_activation_error) is not None]
        if forward:
            stats["forward_activation_mape"] = math.fsum(forward) / len(forward)
        for category in CATEGORIES:
            stats[f"mean_contribution_{category}"] = math.fsum(
                r.contribution(category) for r in chosen
            ) / len(chosen)
        out[source] = stats
    return out


def markdown_report(rows: Sequence[ComparisonRow], records: Sequence[Mapping[str, Any]]) -> str:
    """The report: headline per source, the table, and which category carries the error."""
    stats = summary(rows)
    lines = ["# Per-rank memory: simulator vs PyTorch's memory trackers", ""]
    for source, s in stats.items():
        lines.append(
            f"**{source} workloads: peak within {PEAK_GOAL:.0%} on {s['within_goal']:.0f} of "
            f"{s['configurations']:.0f} configurations; peak MAPE {s['peak_mape']:.1%}, "
            f"max |error| {s['peak_max_abs_error']:.1%}"
            + (
                f"; activations at end of forward MAPE {s['forward_activation_mape']:.1%}"
                if "forward_activation_mape" in s
                else ""
            )
            + ".**"
        )
        lines.append("")
    lines += [
        "Measured: one DDP or FSDP2 training step as rank 0 of torch's fake process group of W ranks, "
        "fp32 on CPU, under `MemTracker` (DDP, bucket buffers registered) or `FSDPMemTracker` (FSDP2). "
        "Predicted: the simulator's memory timeline for the same workload, batch, optimizer, world size "
        "and strategy, with zero allocator overhead (the trackers count tensors only) and "
        "instantaneous collectives (the fake group). `temp` is modelled for the partial gradients of "
        "tied parameters and the optimizer step's scratch tensors (single-tensor AdamW on CPU), not "
        "for other backward temporaries (gradients of activations). Category cells read measured/predicted MB "
        "(predicted - measured as a share of the measured peak: the shares add up to the peak error). "
        "`fwd act` compares the activations held at the end of forward (tracker, loss included) with the "
        "workload's saved-activation bytes times the batch, whatever phase the peak falls in.",
        "",
        "Known limits of the model (see simcore.compute.memory, simcore.strategies.passes, simcore.workload.torch_import): "
        "backward temporaries other than tied-gradient partials (gradients of activations, per-layer "
        "workspaces) are not modelled, so measured `temp` above the predicted is mostly those; the "
        "import traces the module's forward only, not the loss (cross entropy's fp32 log-softmax of "
        "the logits), which the transformer presets include; the `bert-base` preset carries BERT's "
        "masked-LM head tied to the word embeddings (logits and a tied gradient) while the measured "
        "module is the bare encoder with its pooler; and the trackers file some tensors under other "
        "categories than ours (FSDP2's unsharded gradients and their sum with a tied partial count as "
        "`Temp`; we count them as `buffers`), so categories can disagree where the peak agrees.",
        "",
        "## Where the peak error comes from",
        "",
        "Mean of (predicted - measured) per category, as a share of the measured peak:",
        "",
        "| source | " + " | ".join(CATEGORIES) + " |",
        "|---|" + "---|" * len(CATEGORIES),
    ]
    for source, s in stats.items():
        lines.append(
            f"| {source} | " + " | ".join(f"{s[f'mean_contribution_{c}']:+.1%}" for c in CATEGORIES) + " |"
        )
    header, body = _table_cells(rows)
    lines += [
        "",
        "## Per configuration (MB = 1e6 bytes)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    lines += ["", "Peak phases (measured / predicted):", ""]
    lines += [
        f"- {r.model} {r.strategy} W={r.world_size} {r.source}: {r.measured_phase} / {r.predicted_phase}"
        for r in rows
    ]
    prov = next((r.get("provenance") for r in records if r.get("provenance")), None)
    if prov:
        lines += [
            "",
            "## Provenance",
            "",
            f"- date {prov.get('date')}, torch {prov.get('torch')}, "
            f"python {prov.get('python')}, {prov.get('platform')}, {len(records)} measured steps",
        ]
    return "\n".join(lines) + "\n"


def write_plots(rows: Sequence[ComparisonRow], out_dir: Path) -> list[Path]:
    """Predicted vs measured peak (log-log, with the 5 % band) and per-category bars at the largest W;
    nothing when there are no rows (no model measured has the workload source asked for)."""
    if not rows:
        return []
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    frame = pd.DataFrame(
        [
            {
                "model": r.model,
                "strategy": r.strategy,
                "W": r.world_size,
                "source": r.source,
                "measured MB": r.measured_peak / MB,
                "predicted MB": r.predicted_peak / MB,
            }
            for r in rows
        ]
    )
    grid = sns.relplot(
        data=frame,
        x="measured MB",
        y="predicted MB",
        hue="model",
        style="strategy",
        col="source",
        kind="scatter",
        height=4,
    )
    low, high = (
        frame[["measured MB", "predicted MB"]].min().min() * 0.8,
        frame[["measured MB", "predicted MB"]].max().max() * 1.2,
    )
    for ax in grid.axes.flat:
        ax.set(xscale="log", yscale="log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.plot([low, high], [low, high], color="black", linewidth=0.8)
        ax.fill_between(
            [low, high],
            [low * (1 - PEAK_GOAL), high * (1 - PEAK_GOAL)],
            [low * (1 + PEAK_GOAL), high * (1 + PEAK_GOAL)],
            color="grey",
            alpha=0.2,
        )
    peak_path = out_dir / "memory_peak.png"
    try:
        save_figure(grid.figure, peak_path, dpi=120)
    finally:
        plt.close(grid.figure)
    top = max(r.world_size for r in rows)
    long = [
        {
            "model": r.model,
            "strategy": r.strategy,
            "category": c,
            "MB": value / MB,
            "kind": f"{kind} ({r.source})",
        }
        for r in rows
        if r.world_size == top
        for kind, values in (("measured", r.measured), ("predicted", r.predicted))
        for c in CATEGORIES
        for value in [values[c]]
        if kind == "predicted" or r.source == "import"
    ]
    bars = sns.catplot(
        data=pd.DataFrame(long),
        x="category",
        y="MB",
        hue="kind",
        col="model",
        row="strategy",
        kind="bar",
        height=3.2,
        aspect=1.4,
        sharey=False,
    )
    bars.figure.suptitle(f"per-rank bytes by category at the peak, W = {top}", y=1.02)
    bars.tick_params(axis="x", labelrotation=30)
    bars_path = out_dir / "memory_categories.png"
    try:
        save_figure(bars.figure, bars_path, dpi=120)
    finally:
        plt.close(bars.figure)
    return [peak_path, bars_path]
