"""The plan as a table, a JSON document (``trainsim-plan``, version 1) or CSV rows.

JSON: ``schema``, ``version``, the model, cluster and batch; ``configs_considered``,
``configs_pruned`` (memory floor above the GPU's usable memory: not timed), ``configs_evaluated``
and, where the search skipped any, ``configs_skipped_by_bound`` (a lower bound on the step above
the listed layouts': not timed, :mod:`simcore.planner.search`; per count ``skipped_by_bound``); ``interrupted``; ``gpu_counts``, one entry per count with its bookkeeping,
``why`` and ``ranked`` (the best ``--top`` layouts, each a what-if record,
:meth:`simcore.report.StepReport.to_record`, plus ``rank``, ``layout``, ``train_hours``,
``train_cost`` and ``cost_per_million``; ``layout`` holds the label, e.g. ``"zero1 dp32 tp8 pp4
vpp2 mb=1"``, and every degree and option); ``pareto_gpus`` and ``pareto_cost`` (records of the
frontiers); with ``--from``, ``from`` (the framework config's settings and their sources). CSV: one row per ranked layout, nested fields flattened as in the what-if. The table's ``bubble``
is the pipeline's idle share of the step and ``comm s`` the exposed communication beyond it
(:func:`simcore.planner.rank.step_components`).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from simcore.planner.rank import Ranked, step_components, throughput
from simcore.planner.search import CountResult, PlanResult, Prepared
from simcore.planner.space import describe_axes, max_micro_batch
from simcore.report import records_to_csv

__all__ = ["SCHEMA", "format_counts", "format_csv", "format_json", "format_table", "plan_document"]

SCHEMA = "trainsim-plan"
SCHEMA_VERSION = 1
GiB = 2**30


def _si(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {suffix}"
    return f"{value:.1f}"


def _unit(result: PlanResult) -> str:
    return "tokens" if result.prepared.job.workload.tokens_per_sample else "samples"


def _record(rank: int, ranked: Ranked) -> dict[str, Any]:
    return {"rank": rank, **ranked.to_record()}


def plan_document(result: PlanResult, *, top: int) -> dict[str, Any]:
    """The JSON document (see the module docstring)."""
    prepared, job = result.prepared, result.prepared.job
    workload, config = job.workload, job.config
    skipped = sum(c.bound_skipped for c in result.counts)  # listed only when some were
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "model": workload.name,
        "params": workload.params,
        "cluster": job.cluster,
        "global_batch": config.global_batch,
        "seq_len": config.seq_len,
        "tokens_per_step": config.global_batch * workload.tokens_per_sample or None,
        "search": {
            "strategies": list(prepared.space.strategies),
            "micro_batches": list(prepared.space.micro_batches) if prepared.space.micro_batches else None,
            "max_micro_batch": max_micro_batch(prepared.space, workload),
            "recompute": list(prepared.space.recompute),
            "offload": list(prepared.space.offload),
            "schedules": list(prepared.space.schedules),
            "sequence_parallel": list(prepared.space.sequence_parallel),
            "tp_comm_overlap": prepared.space.tp_comm_overlap,
            "ring_kv": prepared.space.ring_kv,
            "ring_merge": prepared.space.ring_merge,
            "fp8": config.fp8,
            **_degrees(result),
        },
        "configs_considered": sum(c.considered for c in result.counts),
        "configs_pruned": result.configs_pruned,
        "configs_evaluated": result.configs_evaluated,
        **({"configs_skipped_by_bound": skipped} if skipped else {}),
        "interrupted": result.interrupted,
        "gpu_counts": [_count_entry(c, top) for c in result.counts],
        "pareto_gpus": [_record(1, r) for r in result.gpu_frontier],
        "pareto_cost": [_record(1, r) for r in result.cost_frontier],
    }


def _degrees(result: PlanResult) -> dict[str, list[int]]:
    axes = result.prepared.axes
    return {name: list(getattr(axes, name)) for name in ("tp", "pp", "cp", "ep", "vpp")} if axes else {}


def _count_entry(count: CountResult, top: int) -> dict[str, Any]:
    return {
        "gpus": count.gpus,
        "nodes": count.nodes,
        "device": count.device,
        "capacity_bytes": count.capacity_bytes,
        "usable_bytes": count.usable_bytes,
        "considered": count.considered,
        "pruned": count.pruned,
        "evaluated": count.evaluated,
        "no_fit": count.no_fit,
        "over_budget": count.over_budget,
        "failed": count.failed,
        **({"skipped_by_bound": count.bound_skipped} if count.bound_skipped else {}),
        "skipped": count.skipped or None,
        "why": count.why or None,
        "ranked": [_record(i + 1, r) for i, r in enumerate(count.ranked[:top])],
    }


def format_json(result: PlanResult, *, top: int, extra: dict[str, Any] | None = None) -> str:
    """The document; ``extra`` adds top-level sections (``from``: the framework config it ran from)."""
    return json.dumps({**plan_document(result, top=top), **(extra or {})}, indent=2)


# The plan's own columns before the what-if's fixed ones (simcore.report.CSV_COLUMNS).
LAYOUT_CSV_COLUMNS = ("layout.label", "layout.strategy", "layout.micro_batch", "layout.dp", "layout.tp",
                      "layout.pp", "layout.cp", "layout.ep", "layout.vpp", "layout.schedule",
                      "layout.sequence_parallel", "layout.recompute", "layout.offload")  # fmt: skip
PLAN_CSV_COLUMNS = ("rank", *LAYOUT_CSV_COLUMNS, "train_hours", "train_cost", "cost_per_million")


def format_csv(result: PlanResult, *, top: int) -> str:
    """One row per ranked layout: the plan's columns, then the what-if record's fixed columns."""
    rows = [_record(i + 1, r) for count in result.counts for i, r in enumerate(count.ranked[:top])]
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fixed = records_to_csv(rows).splitlines()
    writer.writerow([*PLAN_CSV_COLUMNS, *next(csv.reader([fixed[0]]))])
    for row, rest in zip(rows, fixed[1:], strict=True):
        layout = row.get("layout") or {}
        own = [row["rank"], *(layout.get(k.split(".", 1)[1]) for k in LAYOUT_CSV_COLUMNS),
               row.get("train_hours"), row.get("train_cost"), row.get("cost_per_million")]  # fmt: skip
        writer.writerow(["" if v is None else v for v in own] + next(csv.reader([rest])))
    return out.getvalue()


def _header(result: PlanResult) -> list[str]:
    prepared, job = result.prepared, result.prepared.job
    workload, config = job.workload, job.config
    first = result.counts[0]
    precision = (config.dtype if config.fp8 == "none" else f"fp8 {config.fp8} linears, bf16") + (
        " + fp32 master weights" if config.mixed_precision and config.master_weights else ""
    )
    batch = f"global batch {config.global_batch}"
    if workload.tokens_per_sample:
        tokens = config.global_batch * workload.tokens_per_sample
        batch += f" x {workload.tokens_per_sample} tokens = {_si(tokens)} tokens per step"
    considered = sum(c.considered for c in result.counts)
    rate = result.configs_evaluated / result.wall_s if result.wall_s > 0 else 0.0
    engine = f"{result.engine}, {result.workers} worker(s)"
    axes = describe_axes(prepared.space, prepared.axes) if prepared.axes else "strategy x micro-batch"
    return [
        f"plan for {workload.name} ({workload.params / 1e9:.2f} B parameters) on {job.cluster}: "
        f"{first.device}, {first.capacity_bytes / GiB:.1f} GiB per GPU ({first.usable_bytes / GiB:.1f} usable), "
        f"{prepared.node_size} per node",
        f"{batch}; {precision}, {config.optimizer}",
        f"searched {axes}",
        f"{considered} configurations: {result.configs_pruned} skipped untimed (memory floor above the usable "
        f"memory){_bound_words(result)}, {result.configs_evaluated} evaluated in {result.wall_s:.1f} s "
        f"({engine}; {rate:.0f} per s)",
    ]


def _bound_words(result: PlanResult) -> str:
    skipped = sum(c.bound_skipped for c in result.counts)
    if not skipped:
        return ""
    return f", {skipped} skipped by bound (lower bound on the step above the listed layouts')"


def _count_lines(result: PlanResult, count: CountResult, top: int) -> list[str]:
    unit = _unit(result)
    head = (
        f"{count.gpus} GPUs ({count.nodes} node(s) of {count.device}): {count.considered} layouts, "
        f"{count.pruned} skipped untimed, "
        + (f"{count.bound_skipped} skipped by bound, " if count.bound_skipped else "")
        + f"{count.evaluated} evaluated, {count.no_fit} do not fit"
    )
    if count.over_budget:
        head += f", {count.over_budget} over budget"
    if count.failed:
        head += f", {count.failed} refused by the model"
    lines = ["", head]
    if count.skipped:
        return [*lines, f"  no layout: {count.skipped}"]
    if not count.ranked:
        reason = (
            f"smallest memory floor {count.smallest_floor_bytes / GiB:.1f} GiB"
            if count.pruned
            else "see above"
        )
        return [*lines, f"  nothing fits ({reason}; usable {count.usable_bytes / GiB:.1f} GiB per GPU)"]
    budget = result.prepared.budget
    extra = (" run h" if budget.train_tokens or budget.train_samples else "") + (
        f" $/M {unit[:3]}" if budget.price_per_gpu_hour else ""
    )
    shown = count.ranked[:top]
    width = max(28, *(len(r.label) for r in shown))
    lines.append(
        f"  {'#':>2} {'layout':{width}} {'step s':>8} {unit + '/s':>11} {'MFU':>5} {'bubble':>6} "
        f"{'comm s':>7} {'peak GiB':>8}{extra}"
    )
    for i, r in enumerate(shown):
        rep = r.report
        parts = step_components(rep)
        bubble = parts["pipeline bubble"] / rep.step_time_s if rep.step_time_s > 0 else 0.0
        row = (
            f"  {i + 1:>2} {r.label:{width}} {rep.step_time_s:>8.3f} {_si(throughput(rep)):>11} "
            f"{rep.mfu:>5.2f} {bubble:>6.2f} {parts['exposed communication']:>7.3f} "
            f"{rep.peak_memory_bytes / GiB:>8.1f}"
        )
        if budget.train_tokens or budget.train_samples:
            row += f" {r.hours:>5.0f}" if r.hours is not None else "     -"
        if r.cost_per_million is not None:
            row += f" {r.cost_per_million:>8.3g}"
        lines.append(row)
    lines.append(f"  why: {count.why}")
    return lines


def _frontier_lines(result: PlanResult) -> list[str]:
    unit = _unit(result)
    lines = ["", "Pareto frontier, throughput vs GPUs (each count's best beats every smaller count's):"]
    for r in result.gpu_frontier:
        cost = f", ${r.cost_per_million:.3g} per M {unit}" if r.cost_per_million is not None else ""
        lines.append(f"  {r.gpus:>6} GPUs  {_si(throughput(r.report)):>9} {unit}/s  {r.label}{cost}")
    if not result.gpu_frontier:
        lines.append("  (no layout fits at any count)")
    if result.prepared.budget.price_per_gpu_hour is None:
        lines.append("Pareto frontier, throughput vs cost: give --price-per-gpu-hour")
        return lines
    lines.append("Pareto frontier, throughput vs cost (no other best is both faster and cheaper per token):")
    for r in result.cost_frontier:
        run = f", run {r.cost:,.0f} in {r.hours:,.0f} h" if r.cost is not None and r.hours is not None else ""
        lines.append(
            f"  {r.gpus:>6} GPUs  {_si(throughput(r.report)):>9} {unit}/s  "
            f"${r.cost_per_million:.3g} per M {unit}{run}  {r.label}"
        )
    return lines


def format_counts(prepared: Prepared) -> str:
    """``--count``: the candidates per GPU count and how many would be timed, nothing timed."""
    job = prepared.job
    axes = describe_axes(prepared.space, prepared.axes) if prepared.axes else "strategy x micro-batch"
    lines = [f"search for {job.workload.name} on {job.cluster}: {axes}"]
    for gpus in sorted(prepared.counts):
        count = prepared.counts[gpus]
        timed = sum(1 for g, _ in prepared.tasks if g == gpus)
        line = (
            f"{gpus:>6} GPUs: {count.considered} layouts, {count.pruned} skipped untimed, {timed} to evaluate"
            " (offload variants included)"
        )
        lines.append(line + (f" (no layout: {count.skipped})" if count.skipped else ""))
    considered = sum(c.considered for c in prepared.counts.values())
    lines.append(f"total: {considered} layouts, {len(prepared.tasks)} to evaluate")
    return "\n".join(lines) + "\n"


def format_table(result: PlanResult, *, top: int) -> str:
    lines = _header(result)
    for count in result.counts:
        lines += _count_lines(result, count, top)
    lines += _frontier_lines(result)
    return "\n".join(lines) + "\n"
