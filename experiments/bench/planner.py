"""Benchmark rows for the planner: the fast path, a fixed sweep, a plan, start-up and selection.

Each row names its case, what it measured and the target it is held to (the issue's targets,
checked here and never by timed unit tests):

- ``fast path``: ms per configuration in process (median and 90th percentile, warm caches) over
  the fixed grid of :func:`fast_path_rows` at each GPU count, with the discrete-event path on the
  same grid beside it (target: median <= 2 ms, independent of GPU count);
- ``3-D fast path``: ms per call of one 3-D parallel step (:func:`three_d_row`: Llama-2-70B on
  1,024 H100s, tp8 pp8 vpp2, ZeRO-1) on the event-free path with a :class:`ComposeCache` shared
  across calls and no trace, as the planner times a layout it has seen (target: median <= 5 ms),
  with the first call's cost (a layout seen for the first time) in the note;
- ``sweep (local)``: a fixed sweep of :data:`SWEEP_CONFIGS` configurations (:func:`fixed_sweep`)
  on the local process pool (target <= 20 s); ``sweep (ray)``, with ``--ray``: the same sweep as
  Ray tasks on a local instance, and whether its outcomes equal the pool's;
- ``plan llama2-70b``: ``python -m experiments.plan`` for Llama-2-70B on hgx-h100 over 64..1024
  GPUs in a fresh interpreter (target <= 30 s);
- ``--help <module>``: every entry point's ``--help`` in a fresh interpreter (target <= 0.3 s);
  ``what_if default``: ``python -m experiments.what_if --gpus 16`` (target <= 1.0 s);
- ``selection``: the automatic algorithm choice for a 1 GiB all_reduce over 4096 GPUs on cold
  caches against the pinned ring (both plan the collective; the difference is selection).

Wall times on a shared machine are noisy: each is the median of ``repeats`` runs, and the note
gives the CPU seconds beside it (the process's, its children's for a fresh interpreter or a pool),
which other processes on the machine do not inflate. The fast path's ms per configuration is CPU
time of the one process that evaluates it.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from experiments.bench.whatif import timed_command
from experiments.console import COMMANDS
from simcore.collectives import build_plan
from simcore.parallel.cache import ComposeCache
from simcore.parallel.layout import ParallelLayout
from simcore.parallel.step import simulate_parallel_step
from simcore.planner.evaluate import (
    Outcome,
    PlanJob,
    Task,
    WorkerCaches,
    evaluate_tasks,
    install_worker_caches,
    load_topology,
)
from simcore.planner.executors import run_sweeps
from simcore.planner.space import PlanLayout, SearchSpace, data_parallel_axes, layouts_for
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload
from topologies import load_cluster

__all__ = [
    "ENTRY_POINTS",
    "SWEEP_CONFIGS",
    "PlannerBenchRow",
    "fast_path_rows",
    "fixed_sweep",
    "format_planner_table",
    "help_rows",
    "plan_row",
    "planner_rows",
    "selection_row",
    "sweep_rows",
    "three_d_row",
    "what_if_row",
]

SWEEP_CONFIGS = 10_000
# Every ``python -m`` entry point (the console script's subcommands) and the console script itself.
ENTRY_POINTS = tuple(sorted({command.module for command in COMMANDS.values()} | {"experiments.console"}))
PLAN_ARGS = ("--model", "llama2-70b", "--cluster", "hgx-h100", "--gpus", "64..1024", "--seq-len", "4096")


@dataclass(frozen=True, slots=True)
class PlannerBenchRow:
    """One measurement: ``value`` in ``unit`` against ``target`` (``ok`` None when there is none)."""

    case: str
    gpus: int | None
    configs: int | None
    value: float
    unit: str
    target: float | None
    ok: bool | None
    note: str = ""


def _row(case: str, value: float, unit: str, target: float | None, **kwargs: object) -> PlannerBenchRow:
    ok = None if target is None else value <= target
    return PlannerBenchRow(case, value=value, unit=unit, target=target, ok=ok, **kwargs)  # type: ignore[arg-type]


# The data-parallel planner's space (the fast path's): recompute off or full, no model parallelism.
_DP_SPACE = SearchSpace(recompute=("none", "full"), max_micro_batch=32)


def _grid(gpus: int, workload: Workload) -> tuple[TrainingConfig, list[PlanLayout]]:
    """Every strategy x micro-batch 1, 2, 4 x recompute; 8 samples per GPU (accumulation 8, 4, 2)."""
    config = TrainingConfig(global_batch=gpus * 8, seq_len=1024)
    space = SearchSpace(micro_batches=(1, 2, 4), recompute=("none", "full"))
    layouts, _ = layouts_for(space, data_parallel_axes(workload), workload, gpus, config.global_batch, 8)
    return config, layouts


def _timed(job: PlanJob, tasks: Sequence[Task]) -> list[float]:
    """CPU seconds per task, the cluster warm (one untimed pass loads it and prices its collectives)."""
    warm = WorkerCaches()
    evaluate_tasks(job, tasks, warm)
    # Timed as a sweep times them: the warm cluster, contexts and step caches of the timed pass's
    # own (no probe or folded copy of the warm-up pass reused; each layout's probe is its own).
    timed = WorkerCaches(
        warm.clusters, warm.topologies, workloads=warm.workloads, workload_of=warm.workload_of
    )
    times = []
    for task in tasks:
        start = time.process_time()
        evaluate_tasks(job, [task], timed)
        times.append(time.process_time() - start)
    return times


def fast_path_rows(
    gpu_counts: Sequence[int] = (16, 128, 1024), *, model: str = "gpt2-xl", cluster: str = "dgx-a100"
) -> list[PlannerBenchRow]:
    """ms per configuration on the fast and the discrete-event path over :func:`_grid` per count."""
    workload = load_workload(model, seq_len=1024)
    rows = []
    for gpus in gpu_counts:
        config, layouts = _grid(gpus, workload)
        tasks = [(gpus, layout) for layout in layouts]
        fast = _timed(
            PlanJob(workload, cluster, load_cluster, config, engine_path="fast", key="bench"), tasks
        )
        des = _timed(PlanJob(workload, cluster, load_cluster, config, engine_path="des", key="bench"), tasks)
        median, p90 = statistics.median(fast) * 1e3, statistics.quantiles(fast, n=10)[-1] * 1e3
        note = f"CPU; p90 {p90:.1f} ms; discrete-event path median {statistics.median(des) * 1e3:.1f} ms; {model}"
        rows.append(_row("fast path", median, "ms/config", 2.0, gpus=gpus, configs=len(tasks), note=note))
    return rows


def three_d_row(*, gpus: int = 1024, repeats: int = 7) -> PlannerBenchRow:
    """CPU ms of one 3-D parallel step on the fast path, warm (see the module docstring)."""
    workload = load_workload("llama2-70b", seq_len=4096, dtype="bf16")
    config = TrainingConfig(global_batch=1024, micro_batch=1, seq_len=4096)
    topology = load_cluster("hgx-h100", gpus=gpus)
    layout, cache = ParallelLayout(tp=8, pp=8, vpp=2), ComposeCache()

    def once() -> float:
        start = time.process_time()
        simulate_parallel_step(
            workload, config, topology, "zero1", layout, cache=cache, path="fast", trace=False
        )
        return time.process_time() - start

    first = once()  # the layout seen for the first time: its stages built and run
    median = statistics.median(once() for _ in range(repeats)) * 1e3
    note = f"CPU, warm ComposeCache; first call {first * 1e3:.0f} ms; llama2-70b hgx-h100 tp8 pp8 vpp2 zero1"
    return _row("3-D fast path", median, "ms/config", 5.0, gpus=gpus, configs=1, note=note)


def fixed_sweep(configs: int = SWEEP_CONFIGS) -> list[tuple[PlanJob, list[Task]]]:
    """The first ``configs`` of GPT-2 XL's layouts (every strategy, micro-batch up to 32, recompute)
    on six cluster kinds, at 8..1024 GPUs and global batches of 256..4096 sequences (the model is
    the what-if's default, so the sweep prices what a user asks first)."""
    workload = load_workload("gpt2-xl", seq_len=1024)
    parts: list[tuple[PlanJob, list[Task]]] = []
    left = configs
    for cluster in ("dgx-a100", "hgx-h100", "hgx-h200", "g5.48xlarge", "g5.12xlarge", "pcie-nvl-pairs"):
        for batch in (256, 512, 1024, 2048, 4096):
            config = TrainingConfig(global_batch=batch, seq_len=1024)
            tasks = [
                (gpus, layout)
                for gpus in (8, 16, 32, 64, 128, 256, 512, 1024)
                for layout in layouts_for(_DP_SPACE, data_parallel_axes(workload), workload, gpus, batch, 8)[
                    0
                ]
            ][:left]
            if tasks:
                parts.append(
                    (PlanJob(workload, cluster, load_cluster, config, key=f"sweep-{cluster}-{batch}"), tasks)
                )
            left -= len(tasks)
    return parts


def _ranked(outcomes: Sequence[Outcome | None]) -> list[tuple[object, ...]]:
    return [
        (o.gpus, o.layout, o.report.step_time_s, o.report.peak_memory_bytes)
        for o in outcomes
        if o is not None and o.report is not None
    ]


def sweep_rows(
    configs: int = SWEEP_CONFIGS, *, workers: int | None = None, ray: bool = False
) -> list[PlannerBenchRow]:
    """The fixed sweep on the local pool (and as Ray tasks on a local 2-CPU instance with ``ray``)."""
    parts = fixed_sweep(configs)
    process = install_worker_caches()  # what forked workers inherit (earlier rows kept their own)
    for job, tasks in parts:  # loaded before the pool forks, as the planner does
        for gpus in sorted({g for g, _ in tasks}):
            load_topology(job.loader, job.cluster, gpus, process)
    total = sum(len(tasks) for _, tasks in parts)
    before = os.times()
    start = time.perf_counter()
    local = run_sweeps(parts, workers=workers)
    wall = time.perf_counter() - start
    cpu = _cpu_since(before)
    rows = [
        _row(
            "sweep (local)",
            wall,
            "s",
            20.0 if total >= SWEEP_CONFIGS else None,
            configs=total,
            gpus=None,
            note=f"{total / wall:.0f} configs/s on {local[0].workers} worker(s); {cpu:.1f} CPU s",
        )
    ]
    if ray:
        rows.append(_ray_row(parts, local, total))
    return rows


def _ray_row(parts: list[tuple[PlanJob, list[Task]]], local: list, total: int) -> PlannerBenchRow:
    try:
        import ray
    except ImportError:
        return PlannerBenchRow("sweep (ray)", None, total, 0.0, "s", None, None, "ray is not installed")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        start = time.perf_counter()
        remote = run_sweeps(parts, engine="ray", workers=2)
        wall = time.perf_counter() - start
    finally:
        ray.shutdown()
    same = all(_ranked(a.outcomes) == _ranked(b.outcomes) for a, b in zip(local, remote, strict=True))
    return PlannerBenchRow(
        "sweep (ray)",
        None,
        total,
        wall,
        "s",
        None,
        same,
        f"{total / wall:.0f} configs/s; identical to local: {same}",
    )


def _cpu_since(before: os.times_result) -> float:
    """CPU seconds of this process and its finished children since ``before``."""
    after = os.times()
    return sum(
        getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system")
    )


def _started(
    case: str, command: Sequence[str], target: float, repeats: int, **kwargs: object
) -> PlannerBenchRow:
    wall, cpu = timed_command(command, repeats)
    note = f"{cpu:.2f} CPU s" + (f"; {kwargs.pop('note')}" if "note" in kwargs else "")
    return _row(case, wall, "s", target, note=note, **{"gpus": None, "configs": None, **kwargs})


def help_rows(modules: Sequence[str] = ENTRY_POINTS, *, repeats: int = 3) -> list[PlannerBenchRow]:
    """``python -m MODULE --help`` in a fresh interpreter per entry point."""
    return [_started(f"--help {m}", [sys.executable, "-m", m, "--help"], 0.3, repeats) for m in modules]


def what_if_row(*, repeats: int = 3) -> PlannerBenchRow:
    command = [sys.executable, "-m", "experiments.what_if", "--gpus", "16"]
    return _started("what_if default", command, 1.0, repeats, gpus=16)


def plan_row(args: Sequence[str] = PLAN_ARGS, *, repeats: int = 1) -> PlannerBenchRow:
    """``python -m experiments.plan`` in a fresh interpreter, start-up included; ``configs``: the
    configurations it timed (its JSON's ``configs_evaluated``; those skipped by bound in the note)."""
    command = [sys.executable, "-m", "experiments.plan", *args, "--quiet", "--format", "json"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
    }
    walls, cpus, document = [], [], {}
    for _ in range(repeats):
        before, start = os.times(), time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True, env=env, timeout=600)
        walls.append(time.perf_counter() - start)
        after = os.times()
        cpus.append(
            after.children_user - before.children_user + after.children_system - before.children_system
        )
        document = json.loads(done.stdout)
    skipped = document.get("configs_skipped_by_bound", 0)
    note = (
        f"{statistics.median(cpus):.2f} CPU s; {' '.join(args)}; {document.get('configs_considered')} "
        f"considered, {document.get('configs_pruned')} under the memory floor, {skipped} skipped by bound"
    )
    return _row(
        f"plan {args[1]}", statistics.median(walls), "s", 30.0, gpus=None,
        configs=document.get("configs_evaluated"), note=note,
    )  # fmt: skip


def selection_row(gpus: int = 4096, *, cluster: str = "dgx-a100") -> PlannerBenchRow:
    """Automatic choice vs the pinned ring for one 1 GiB all_reduce over ``gpus`` GPUs (cold caches)."""
    walls = {}
    for algorithm in ("ring", None):
        topology = load_cluster(cluster, gpus=gpus, fabric="leaf-spine")
        start = time.perf_counter()
        chosen = build_plan(topology, "all_reduce", 2**30, algorithm=algorithm).algorithm
        walls[algorithm or chosen] = time.perf_counter() - start
    auto = next(name for name in walls if name != "ring" or len(walls) == 1)
    note = f"chose {auto}; pinned ring {walls['ring']:.2f} s"
    return _row("selection all_reduce 1GiB", walls[auto], "s", None, gpus=gpus, configs=None, note=note)


def planner_rows(*, quick: bool = False, repeats: int = 3, ray: bool = False) -> list[PlannerBenchRow]:
    """Every row (``quick``: a tiny version of each for tests)."""
    if quick:
        return [
            *fast_path_rows((8,), model="gpt2-small"),
            *sweep_rows(24, workers=2),
            *help_rows(("experiments.plan",), repeats=1),
            selection_row(16),
        ]
    return [
        *fast_path_rows(),
        three_d_row(),
        *sweep_rows(ray=ray),
        plan_row(),
        *help_rows(repeats=repeats),
        what_if_row(repeats=repeats),
        selection_row(),
    ]


def format_planner_table(rows: Sequence[PlannerBenchRow]) -> str:
    lines = [f"{'case':<34} {'gpus':>5} {'configs':>7} {'value':>9} {'unit':<9} {'target':>7} {'ok':<4} note"]
    for r in rows:
        target = "-" if r.target is None else f"{r.target:g}"
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO")
        gpus = "-" if r.gpus is None else str(r.gpus)
        configs = "-" if r.configs is None else str(r.configs)
        lines.append(
            f"{r.case:<34} {gpus:>5} {configs:>7} {r.value:>9.3f} {r.unit:<9} {target:>7} {ok:<4} {r.note}"
        )
    return "\n".join(lines)
