"""The planner: the best ways to train a model on a cluster at several GPU counts.

:func:`prepare` lays out the search (every layout of the :class:`~simcore.planner.space.SearchSpace`
at every GPU count, minus those whose memory floor is above the device's usable memory: they are
counted, not timed); :func:`~simcore.planner.executors.run_sweep` times the rest; :func:`finish`
ranks what fits within the budget, explains each winner and finds the Pareto frontiers.
:func:`plan` does all three.

**Skipped by bound** (:func:`time_tasks` with ``keep``): only the first ``keep`` layouts of each
count are listed, so a candidate whose lower bound on the step
(:func:`~simcore.parallel.step.step_time_lower_bound`) is above the ``keep``-th fastest layout
already timed there (fitting, within the budget) cannot be listed, and is not timed. Candidates
are timed in rounds, smallest bounds first (:data:`SEED_ROUNDS` per count, then the rest), each
round skipping what the layouts timed before it rule out. Never skipped: a pure data-parallel
candidate that may be the best such layout (the explanation names it), and a strategy's
candidates until one of its layouts is known to fit there (the explanation names those that never
fit). The listed layouts, their order and every number of theirs are those of an exhaustive
search; the counts of timed, fitting and over-budget layouts cover what was timed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from simcore.errors import TrainsimError
from simcore.parallel.step import step_time_lower_bound
from simcore.planner.evaluate import Outcome, PlanJob, Task, load_topology, worker_caches
from simcore.planner.executors import Progress, SweepRun, run_sweep
from simcore.planner.floor import memory_floor_bytes
from simcore.planner.rank import Budget, Ranked, cost_frontier, explain_winner, gpu_frontier, price, rank
from simcore.planner.rank import within_budget as fits_budget
from simcore.planner.space import PlanLayout, SearchAxes, SearchSpace, layouts_for, search_axes
from simcore.strategies.runner import gating_device

__all__ = [
    "SEED_ROUNDS",
    "CountResult",
    "PlanResult",
    "Prepared",
    "finish",
    "plan",
    "prepare",
    "task_bounds",
    "task_floors",
    "time_tasks",
]

# Candidates per GPU count timed in each round before the last, smallest bounds first; after each
# round the threshold tightens (on Llama-2-70B over 64..1024 H100s two rounds of 32 and 64 leave
# the last one what the final threshold would: a round costs a pool start).
SEED_ROUNDS = (32, 64)
# Per round, the candidates of each strategy not yet known to fit there timed as well, smallest
# memory floors first (the explanation names the strategies that never fit).
FIT_PROBES = 4
# A bound is skipped on only when above the threshold by more than rounding (the bound and the
# step sum the same compute times in different orders).
BOUND_MARGIN = 1e-9


@dataclass(slots=True)
class CountResult:
    """What the search found at one GPU count."""

    gpus: int
    nodes: int
    device: str
    capacity_bytes: float
    usable_bytes: float
    considered: int = 0
    pruned: int = 0  # memory floor above the usable memory (with every offload tried): never timed
    evaluated: int = 0
    no_fit: int = 0  # timed, peak above the usable memory
    over_budget: int = 0
    failed: int = 0
    bound_skipped: int = 0  # lower bound on the step above the listed layouts': never timed
    skipped: str = ""  # why no layout exists at this count
    smallest_floor_bytes: float = 0.0
    ranked: list[Ranked] = field(default_factory=list)
    why: str = ""
    never_fit: list[str] = field(default_factory=list)  # strategies with no fitting layout


@dataclass(slots=True)
class Prepared:
    """The search laid out: tasks to time and the per-count bookkeeping."""

    job: PlanJob
    space: SearchSpace
    budget: Budget
    tasks: list[Task]
    counts: dict[int, CountResult]
    node_size: int
    axes: SearchAxes | None = None


@dataclass(slots=True)
class PlanResult:
    """The ranked layouts per GPU count, the frontiers, and how much was searched."""

    prepared: Prepared
    counts: list[CountResult]
    configs_evaluated: int
    configs_pruned: int
    interrupted: bool
    engine: str
    workers: int
    wall_s: float
    gpu_frontier: list[Ranked]
    cost_frontier: list[Ranked]


def prepare(job: PlanJob, gpu_counts: Sequence[int], space: SearchSpace, budget: Budget) -> Prepared:
    """Every candidate at every count, with the memory floor's verdict; an error if nothing is left
    to time (naming, per GPU count, why).

    A candidate whose floor is above the usable memory is tried with each offload mode of the
    space instead, unless the same candidate with full recompute fits (the memory levers in order:
    :mod:`simcore.planner.space`); it is counted as pruned when none is tried.
    """
    budget.check_language_model(job.workload.tokens_per_sample)
    counts: dict[int, CountResult] = {}
    tasks: list[Task] = []
    node_size, axes = 1, None
    memo: dict[tuple[object, ...], float] = {}  # activation floors of this workload, this call only
    for gpus in sorted(set(gpu_counts)):
        topology = load_topology(job.loader, job.cluster, gpus)
        spec = gating_device(topology, job.config.dtype)
        node_size = len(topology.ranks_on_host(topology.host_of_rank(0)))
        axes = axes or search_axes(space, job.workload, node_size)
        usable = budget.usable_bytes(spec.memory_bytes)
        if usable <= 0:
            raise TrainsimError(
                f"--memory-headroom leaves no memory on {spec.name} ({spec.memory_bytes / 2**30:.1f} GiB); "
                "ask for less headroom"
            )
        result = counts[gpus] = CountResult(
            gpus, len(topology.hosts), spec.name, float(spec.memory_bytes), usable
        )
        layouts, result.skipped = layouts_for(
            space, axes, job.workload, gpus, job.config.global_batch, node_size
        )
        floors = []
        for layout in layouts:
            result.considered += 1
            floor, chosen = _fitting(job, space, layout, (gpus, node_size, usable, spec.kind), memo)
            floors.append(floor)
            if not chosen:
                result.pruned += 1
            tasks += [(gpus, c) for c in chosen]
        result.smallest_floor_bytes = min(floors, default=0.0)
    _check_not_empty(counts)
    return Prepared(job, space, budget, tasks, counts, node_size, axes)


def _fitting(
    job: PlanJob,
    space: SearchSpace,
    layout: PlanLayout,
    where: tuple[int, int, float, str],
    memo: dict[tuple[object, ...], float],
) -> tuple[float, list[PlanLayout]]:
    """The candidate if its floor fits, else (or when the space has no ``none`` offload) its
    offload variants whose floors fit; and the smallest floor. ``where``: GPUs, GPUs per node,
    usable bytes per GPU, the gating device's kind."""
    gpus, node_size, usable, kind = where
    config = replace(job.config, micro_batch=layout.micro_batch)

    def floor_of(candidate: PlanLayout) -> float:
        return memory_floor_bytes(job.workload, config, candidate, gpus, node_size, memo, device_kind=kind)

    floor = floor_of(layout)
    if floor <= usable and "none" in space.offload:
        return floor, [layout]
    if "none" in space.offload and "full" in space.recompute and layout.recompute != "full":
        sibling = replace(layout, options=replace(layout.options, recompute="full"))
        if floor_of(sibling) <= usable:
            return floor, []  # its full-recompute sibling is searched instead (see the module docstring)
    chosen, smallest = [], floor if "none" in space.offload else float("inf")
    for mode in space.offload:
        if mode == "none":
            continue
        variant = replace(layout, options=replace(layout.options, offload=mode))
        variant_floor = floor_of(variant)
        smallest = min(smallest, variant_floor)
        if variant_floor <= usable:
            chosen.append(variant)
    return smallest, chosen


def _check_not_empty(counts: dict[int, CountResult]) -> None:
    if any(c.considered > c.pruned for c in counts.values()):
        return
    reasons = "; ".join(
        f"{g} GPUs: {c.skipped}" if c.skipped else
        f"{g} GPUs: no layout fits (smallest memory floor {c.smallest_floor_bytes / 2**30:.1f} GiB, "
        f"usable {c.usable_bytes / 2**30:.1f} GiB per GPU)"
        for g, c in counts.items()
    )  # fmt: skip
    raise TrainsimError(f"the search space is empty: {reasons}")


def finish(prepared: Prepared, sweep: SweepRun, wall_s: float) -> PlanResult:
    """Rank what fits within the budget at every count and find the frontiers."""
    fitting: dict[int, list[Ranked]] = {g: [] for g in prepared.counts}
    strategies_fit: dict[int, set[str]] = {g: set() for g in prepared.counts}
    evaluated = 0
    for outcome in sweep.outcomes:
        if outcome is None:
            continue
        evaluated += 1
        count = prepared.counts[outcome.gpus]
        count.evaluated += 1
        if outcome.report is None:
            count.failed += 1
            continue
        if outcome.report.peak_memory_bytes > count.usable_bytes:
            count.no_fit += 1
            continue
        strategies_fit[outcome.gpus].add(outcome.layout.strategy)
        ranked = price(outcome.gpus, outcome.layout, outcome.report, prepared.budget)
        if not fits_budget(ranked, prepared.budget):
            count.over_budget += 1
            continue
        fitting[outcome.gpus].append(ranked)
    for gpus, count in prepared.counts.items():
        count.ranked = rank(fitting[gpus])
        count.never_fit = [s for s in prepared.space.strategies if s not in strategies_fit[gpus]]
        if count.ranked:
            best_dp = next((r for r in count.ranked if r.layout.pure_data_parallel), None)
            count.why = explain_winner(count.ranked, count.never_fit, count.capacity_bytes, best_dp)
            if count.bound_skipped:
                count.why += (
                    f"; {count.bound_skipped} more layout(s) not timed (slower by bound than those listed)"
                )
    bests = [c.ranked[0] for c in prepared.counts.values() if c.ranked]
    return PlanResult(
        prepared,
        [prepared.counts[g] for g in sorted(prepared.counts)],
        evaluated,
        sum(c.pruned for c in prepared.counts.values()),
        sweep.interrupted,
        sweep.engine,
        sweep.workers,
        wall_s,
        gpu_frontier(bests),
        cost_frontier(bests),
    )


def plan(
    job: PlanJob,
    gpu_counts: Sequence[int],
    space: SearchSpace | None = None,
    budget: Budget | None = None,
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    keep: int | None = None,
) -> PlanResult:
    """Search, time and rank (see the module docstring; ``keep`` as :func:`time_tasks`)."""
    start = time.perf_counter()
    prepared = prepare(job, gpu_counts, space or SearchSpace(), budget or Budget())
    sweep = time_tasks(
        prepared, keep=keep, engine=engine, workers=workers, address=address, progress=progress
    )
    return finish(prepared, sweep, time.perf_counter() - start)


def task_bounds(prepared: Prepared) -> list[float]:
    """Each task's lower bound on its step (:func:`~simcore.parallel.step.step_time_lower_bound`;
    0.0 where the what-if's data-parallel step times it), on the inputs the workers time it with."""
    # The process's own caches: a forked pool's workers inherit what pricing the bounds filled in.
    job, cache = prepared.job, worker_caches().compose
    bounds = []
    for gpus, layout in prepared.tasks:
        topology = load_topology(job.loader, job.cluster, gpus)
        config = replace(job.config, micro_batch=layout.micro_batch, activation_checkpointing=False)
        bound = step_time_lower_bound(
            job.workload, config, topology, layout.strategy, layout.parallel, layout.options,
            calibration=job.calibration, path=job.engine_path, cache=cache,
        )  # fmt: skip
        bounds.append(bound)
    return bounds


def task_floors(prepared: Prepared) -> list[float]:
    """Each task's memory floor (:func:`~simcore.planner.floor.memory_floor_bytes`)."""
    job, floors = prepared.job, []
    memo: dict[tuple[object, ...], float] = {}  # activation floors of this workload
    where: dict[int, tuple[int, str]] = {}  # per count: GPUs per node, the gating device's kind
    for gpus, layout in prepared.tasks:
        if gpus not in where:
            topology = load_topology(job.loader, job.cluster, gpus)
            kind = gating_device(topology, job.config.dtype).kind
            where[gpus] = (len(topology.ranks_on_host(topology.host_of_rank(0))), kind)
        node_size, kind = where[gpus]
        config = replace(job.config, micro_batch=layout.micro_batch)
        floors.append(
            memory_floor_bytes(job.workload, config, layout, gpus, node_size, memo, device_kind=kind)
        )
    return floors


def time_tasks(
    prepared: Prepared,
    *,
    keep: int | None = None,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
) -> SweepRun:
    """Time the prepared tasks; ``keep``: the layouts listed per count, the rest skipped by bound
    (see the module docstring; None: every task is timed). Skipped tasks have no outcome."""
    tasks = prepared.tasks

    def sweep(indices: list[int]) -> SweepRun:
        return run_sweep(
            prepared.job, [tasks[i] for i in indices], engine=engine, workers=workers, address=address,
            progress=progress,
        )  # fmt: skip

    if keep is None:
        return sweep(list(range(len(tasks))))
    keep = max(2, keep)  # the explanation names the runner-up
    bounds, floors = task_bounds(prepared), task_floors(prepared)
    waiting: dict[int, list[int]] = {}  # per count, untimed tasks by bound
    for i in sorted(range(len(tasks)), key=lambda i: (tasks[i][0], bounds[i], i)):
        waiting.setdefault(tasks[i][0], []).append(i)
    outcomes: list[Outcome | None] = [None] * len(tasks)
    run = SweepRun(outcomes, False, engine, 1)
    for size in (*SEED_ROUNDS, len(tasks)):
        listed = _listed_times(prepared, [o for o in outcomes if o is not None])
        batch: list[int] = []
        for gpus, group in waiting.items():
            times, fitting, best_dp = listed.get(gpus, ([], set(), float("inf")))
            threshold = times[keep - 1] if len(times) >= keep else float("inf")
            left: list[int] = []
            for i in group:
                layout = tasks[i][1]
                if (
                    bounds[i] > threshold * (1 + BOUND_MARGIN)
                    and (not layout.pure_data_parallel or bounds[i] > best_dp * (1 + BOUND_MARGIN))
                    and layout.strategy in fitting
                ):
                    prepared.counts[gpus].bound_skipped += 1
                else:
                    left.append(i)
            chosen = set(left[:size])
            for strategy in {tasks[i][1].strategy for i in left} - fitting:
                # its candidates with the smallest memory floors: one that fits lets the rest go
                unknown = sorted(
                    (i for i in left if tasks[i][1].strategy == strategy), key=lambda i: (floors[i], i)
                )
                chosen.update(unknown[:FIT_PROBES])
            batch += chosen
            waiting[gpus] = [i for i in left if i not in chosen]
        batch.sort()
        if not batch:
            break
        run = sweep(batch)
        for i, outcome in zip(batch, run.outcomes, strict=True):
            outcomes[i] = outcome
        if run.interrupted:
            break
    return SweepRun(outcomes, run.interrupted, run.engine, run.workers)


def _listed_times(
    prepared: Prepared, outcomes: Sequence[Outcome]
) -> dict[int, tuple[list[float], set[str], float]]:
    """Per count: the step times of the timed layouts :func:`finish` would rank (fitting, within
    the budget), fastest first; the strategies with a fitting layout; the best pure data-parallel
    step among those ranked (inf: none yet)."""
    found: dict[int, tuple[list[float], set[str], float]] = {}
    for outcome in outcomes:
        count = prepared.counts[outcome.gpus]
        if outcome.report is None or outcome.report.peak_memory_bytes > count.usable_bytes:
            continue
        times, fitting, best_dp = found.get(outcome.gpus, ([], set(), float("inf")))
        fitting.add(outcome.layout.strategy)
        step = outcome.report.step_time_s
        if fits_budget(price(outcome.gpus, outcome.layout, outcome.report, prepared.budget), prepared.budget):
            times.append(step)
            if outcome.layout.pure_data_parallel:
                best_dp = min(best_dp, step)
        found[outcome.gpus] = (times, fitting, best_dp)
    for times, _, _ in found.values():
        times.sort()
    return found
