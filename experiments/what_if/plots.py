"""Plots and the step trace of a what-if run (seaborn/matplotlib imported only when called).

- ``throughput.png``: samples/s per strategy and cluster at the largest GPU count;
- ``memory.png``: per-GPU peak memory (GiB, as the table) by category per strategy, with each
  device's capacity;
- ``scaling.png``: samples/s against GPUs per strategy (only when several GPU counts were run);
- ``staleness.png``: the parameter-server modes' staleness histograms at the largest GPU count, one
  panel per cluster (share of applied gradients per staleness in server versions);
- ``step_trace.json``: one step of every synchronous strategy on every cluster at the largest GPU
  count, as a Chrome trace (open in ui.perfetto.dev): a track per (cluster, strategy) named
  ``<cluster> / <strategy> (<N> GPUs)``, lanes ``compute`` and ``comm``, and a memory counter in
  GiB. Parameter-server modes are simulated per rank without an operation timeline, so they have
  no track (the console line that names the file says so).

Strategy names are long beside a bar: labels are rotated and the figures widen with the number of
strategies, so they stay readable with any number of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from simcore.compute.memory import CATEGORIES
from simcore.net.trace import TraceRecorder
from simcore.output import save_figure
from simcore.parallel.report import ParallelStepReport
from simcore.paramserver import PS_MODES
from simcore.report import StepReport
from simcore.whatif.layouts import point_label

GIB = 2**30  # bytes; memory is in GiB everywhere the what-if shows it

if TYPE_CHECKING:
    from simcore.paramserver import PSResult
    from simcore.whatif.sweep import WhatIfResult

__all__ = ["plot_staleness", "plot_what_if", "write_step_trace"]


def plot_what_if(reports: Sequence[StepReport], out: Path) -> list[Path]:
    """Write the what-if plots under ``out``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    frame = pd.DataFrame([r.to_record() for r in reports])
    frame["strategy"] = [_label(r) for r in reports]  # "<strategy> <layout>" for parallel layouts
    top = frame[frame["gpus"] == frame["gpus"].max()]
    written = []
    fig, ax = plt.subplots(figsize=(_width(top["strategy"].nunique(), 1), 4))
    sns.barplot(data=top, x="strategy", y="samples_per_s", hue="cluster", ax=ax)
    _rotate(ax)
    ax.set_ylabel("samples/s")
    ax.set_title(f"throughput at {int(top['gpus'].iloc[0])} GPUs")
    written.append(_save(fig, out / "throughput.png"))

    written.append(_memory_plot(reports, int(top["gpus"].iloc[0]), out / "memory.png"))

    if frame["gpus"].nunique() > 1:
        grid = sns.relplot(
            data=frame,
            kind="line",
            x="gpus",
            y="samples_per_s",
            hue="strategy",
            col="cluster",
            marker="o",
            height=4,
        )
        grid.set(xscale="log", xlabel="GPUs", ylabel="samples/s")
        written.append(_save(grid.figure, out / "scaling.png"))
    return written


def _width(labels: int, panels: int) -> float:
    """Figure width in inches: room for ``labels`` rotated bar labels in each of ``panels`` panels."""
    return max(6.0, panels * max(4.0, 0.45 * labels + 1.5))


def _rotate(ax: object) -> None:
    """Bar labels at 45 degrees, anchored at their end, so long strategy names never overlap."""
    for label in ax.get_xticklabels():  # type: ignore[attr-defined]
        label.set_rotation(45)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")


def _memory_plot(reports: Sequence[StepReport], gpus: int, path: Path) -> Path:
    """Stacked per-GPU peak memory (GiB) by category per strategy, one panel per cluster, capacity dashed."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    chosen = [r for r in reports if r.gpus == gpus]
    clusters = list(dict.fromkeys(r.cluster for r in chosen))
    strategies = len({r.strategy for r in chosen})
    colours = sns.color_palette(n_colors=len(CATEGORIES))
    fig, axes = plt.subplots(
        1, len(clusters), figsize=(_width(strategies, len(clusters)), 4.5), squeeze=False, sharey=True
    )
    for ax, cluster in zip(axes[0], clusters, strict=True):
        rows = [r for r in chosen if r.cluster == cluster]
        table = pd.DataFrame(
            [{c: r.memory_breakdown.get(c, 0.0) / GIB for c in CATEGORIES} for r in rows],
            index=[_label(r) for r in rows],
        )
        table.plot.bar(stacked=True, ax=ax, color=colours, legend=ax is axes[0][-1])
        _rotate(ax)
        ax.axhline(rows[0].memory_capacity_bytes / GIB, color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{cluster}: peak memory per GPU at {gpus} GPUs")
        ax.set_ylabel("GiB")
    if axes[0][-1].get_legend() is not None:
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return _save(fig, path)


def _label(report: StepReport) -> str:
    return point_label(report) if isinstance(report, ParallelStepReport) else report.strategy


def plot_staleness(results: Sequence[PSResult], path: Path) -> Path:
    """Staleness histograms of the parameter-server modes at the largest GPU count, a panel per cluster."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd
    import seaborn as sns

    gpus = max(r.step.gpus for r in results)
    rows = [
        {
            "cluster": r.step.cluster,
            "mode": r.mode,
            "staleness": delay,
            "share": count / max(1, r.gradients_applied),
        }
        for r in results
        if r.step.gpus == gpus
        for delay, count in sorted(r.staleness_histogram.items())
    ]
    frame = pd.DataFrame(rows)
    order = [m for m in PS_MODES if m in set(frame["mode"])]
    grid = sns.catplot(
        data=frame,
        kind="bar",
        x="staleness",
        y="share",
        hue="mode",
        hue_order=order,
        col="cluster",
        height=4,
        aspect=1.4,
    )
    grid.set_axis_labels("staleness (server versions)", "share of applied gradients")
    grid.figure.suptitle(f"parameter-server staleness at {gpus} GPUs", y=1.02)
    return _save(grid.figure, path)


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        return save_figure(fig, path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)  # type: ignore[arg-type]


def write_step_trace(result: WhatIfResult, path: Path) -> tuple[Path, str]:
    """A Chrome trace of one step per (cluster, synchronous strategy) at the largest GPU count.

    Returns the path and one line saying what it holds (for the console).
    """
    recorder = TraceRecorder()
    gpus = max(rec.gpus for rec in result.recommendations)
    tracks = []
    for (cluster, strategy, count), step in result.steps.items():
        if count != gpus:
            continue
        track = f"{cluster} / {strategy} ({count} GPUs)"
        tracks.append(track)
        for span in step.run.spans:
            recorder.slice(
                track,
                span.stream,
                span.name,
                span.start_s,
                span.end_s,
                {"bytes": span.bytes} if span.bytes else None,
            )
        for time_s, total, _phase in step.run.memory.samples:
            recorder.counter(track, "memory", time_s, {"GiB": total / GIB})
    untraced = sorted({ps.mode for ps in result.ps_results.values()})
    what = f"one step of {len(tracks)} (cluster, strategy) pair(s) at {gpus} GPUs, a track each"
    if untraced:
        what += f"; {', '.join(untraced)} not traced (simulated per rank, without an operation timeline)"
    return recorder.write(path), what
