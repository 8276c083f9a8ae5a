"""Figures of the staleness-to-accuracy study (seaborn and matplotlib are imported only when plotting).

:func:`write_plots` draws the accuracy curves, the penalty against staleness and the time to the
target accuracy; :mod:`experiments.staleness_accuracy.report` re-exports it and links the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.staleness_accuracy.trainer import SettingResult
from simcore.output import save_figure

if TYPE_CHECKING:
    from experiments.staleness_accuracy.report import SummaryRow

__all__ = ["write_plots"]


def write_plots(
    out_dir: Path, results: Sequence[SettingResult], rows: Sequence[SummaryRow], target: float, time_unit: str
) -> list[Path]:
    """Seaborn figures: accuracy curves, penalty vs staleness, time-to-accuracy bars (PNG paths)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    curves = pd.DataFrame(
        [
            {
                "setting": res.setting.name,
                "seed": run.seed,
                "epoch": u / run.updates_per_epoch,
                "test accuracy": a,
            }
            for res in results
            for run in res.runs
            for u, a in zip(run.updates, run.accuracy, strict=True)
        ]
    )
    summary = pd.DataFrame([asdict(row) for row in rows])
    paths = [
        out_dir / "accuracy_curves.png",
        out_dir / "penalty_vs_staleness.png",
        out_dir / "time_to_accuracy.png",
    ]
    drawers = (_plot_curves, _plot_penalty, _plot_time_to_target)
    for path, draw, data in zip(paths, drawers, (curves, summary, summary), strict=True):
        fig = draw(plt, sns, data, target, time_unit)
        try:
            save_figure(fig, path, dpi=120, bbox_inches="tight")
        finally:
            plt.close(fig)
    return paths


def _plot_curves(plt: Any, sns: Any, curves: Any, target: float, time_unit: str) -> Any:
    fig, ax = plt.subplots(figsize=(8, 5))
    sns.lineplot(data=curves, x="epoch", y="test accuracy", hue="setting", errorbar="sd", ax=ax)
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label="target")
    ax.set_title("Test accuracy during training (mean ± std over seeds)")
    return fig


def _plot_penalty(plt: Any, sns: Any, summary: Any, target: float, time_unit: str) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, column in zip(axes, ("mean_staleness", "p99_staleness"), strict=True):
        sns.scatterplot(data=summary, x=column, y="penalty_points", hue="mode", style="family", s=60, ax=ax)
        ax.set_xlabel(column.replace("_", " "))
    axes[0].set_ylabel("accuracy penalty vs sync (points)")
    fig.suptitle("Accuracy penalty against staleness")
    return fig


def _plot_time_to_target(plt: Any, sns: Any, summary: Any, target: float, time_unit: str) -> Any:
    fig, ax = plt.subplots(figsize=(8, 4))
    known = summary[summary["time_to_target"].notna()]
    column = "time_to_target" if not known.empty else "updates_to_target"
    sns.barplot(data=known if not known.empty else summary, x="name", y=column, hue="mode", ax=ax)
    ax.set_xlabel("")
    ax.set_ylabel(
        f"time to {target:.3f} accuracy ({time_unit})" if column == "time_to_target" else "updates to target"
    )
    ax.tick_params(axis="x", rotation=45)
    ax.set_title("Time to target accuracy (mean over the seeds that reached it)")
    return fig
