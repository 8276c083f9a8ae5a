"""The plan's files under ``--out``: ``pareto.png`` (seaborn/matplotlib, imported only here),
``plan.json`` (the document :func:`experiments.plan.report.plan_document` prints) and
``report.html`` (:mod:`experiments.report_html.plan`, rendered from that same document)."""

from __future__ import annotations

from pathlib import Path

from experiments.plan.report import plan_document
from experiments.report_html.plan import render_plan
from experiments.report_html.write import write_report
from simcore.output import output_set, save_figure, write_json_atomic
from simcore.planner.rank import throughput
from simcore.planner.search import PlanResult

__all__ = ["plot_pareto", "write_outputs"]


def write_outputs(
    result: PlanResult, out: Path, *, top: int, command: str = "python -m experiments.plan"
) -> list[Path]:
    """Write ``plan.json``, ``report.html`` and, when some layout fits, ``pareto.png``; returns the
    paths written."""
    doc = plan_document(result, top=top)
    with output_set():  # all of them or, when one fails (a full disk), none made new
        document = write_json_atomic(out / "plan.json", doc)
        written = [document, write_report(out, render_plan(doc, command))]
        if any(count.ranked for count in result.counts):
            written.append(plot_pareto(result, out / "pareto.png"))
    return written


def plot_pareto(result: PlanResult, path: Path) -> Path:
    """Throughput of every ranked layout against GPUs, the best per count joined, the frontier marked;
    with a price, a second panel of throughput against cost per million tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    unit = "tokens/s" if result.prepared.job.workload.tokens_per_sample else "samples/s"
    rows = pd.DataFrame(
        [
            {"gpus": c.gpus, "throughput": throughput(r.report), "strategy": r.layout.strategy}
            for c in result.counts
            for r in c.ranked
        ]
    )
    priced = bool(result.cost_frontier)
    fig, axes = plt.subplots(1, 2 if priced else 1, figsize=(12 if priced else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    sns.scatterplot(data=rows, x="gpus", y="throughput", hue="strategy", alpha=0.5, ax=ax)
    bests = [c.ranked[0] for c in result.counts if c.ranked]
    ax.plot([b.gpus for b in bests], [throughput(b.report) for b in bests], color="black", lw=1, label="best")
    frontier = result.gpu_frontier
    ax.scatter([f.gpus for f in frontier], [throughput(f.report) for f in frontier], s=90, facecolors="none",
               edgecolors="red", label="Pareto frontier")  # fmt: skip
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="GPUs",
        ylabel=unit,
        title=f"{result.prepared.job.workload.name} on {result.prepared.job.cluster}",
    )
    ax.legend(fontsize=8)
    if priced:
        ax = axes[0][1]
        points = [b for b in bests if b.cost_per_million is not None]
        ax.scatter([b.cost_per_million for b in points], [throughput(b.report) for b in points], color="grey")
        for b in points:
            ax.annotate(f"{b.gpus}", (b.cost_per_million or 0.0, throughput(b.report)), fontsize=8)
        cost = result.cost_frontier
        ax.plot(
            [c.cost_per_million for c in cost], [throughput(c.report) for c in cost], color="red", marker="o"
        )
        ax.set(xlabel=f"cost per million {unit.split('/')[0]}", ylabel=unit, title="throughput vs cost")
    fig.tight_layout()
    try:
        return save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
