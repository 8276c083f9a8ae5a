"""Benchmark rows for the training-step model: the default what-if and FSDP steps at scale.

Two measurements (with their targets, on one core of a 2-core machine):

- ``what_if default``: wall time of ``python -m experiments.what_if --gpus 16`` as a user runs it,
  interpreter start and imports included (target: under 1.5 s), median of ``repeats`` runs;
- ``fsdp step llama2-7b``: one FSDP step of Llama-2-7B on dgx-a100 at 16, 128 and 1024 GPUs,
  timed in-process, median of ``repeats`` runs (later runs may reuse caches of loaded presets and
  priced collectives, as a sweep does; target: under 2 s at 1024 GPUs, and nearly flat in GPU
  count, since identical ranks are simulated once);
- ``3d step llama2-70b``: one step of Llama-2-70B as tp8 x pp8 x dp16 (interleaved, 2 virtual
  stages, ZeRO-1 on the data-parallel axis, sequence parallelism) on 1024 GPUs of dgx-a100, global
  batch 1024 of sequence 4096, on a fresh topology each run (nothing cached from an earlier run;
  building the topology is not timed). Target: under 1 s (one representative rank per stage).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.topology import Topology
from simcore.whatif.sweep import DEFAULT_CONFIG, run_what_if
from simcore.workload.loader import load_workload
from topologies import load_cluster

__all__ = [
    "WhatIfBenchRow",
    "format_whatif_table",
    "fsdp_step_rows",
    "parallel_step_row",
    "timed_command",
    "what_if_cli_row",
]


@dataclass(frozen=True, slots=True)
class WhatIfBenchRow:
    """One timed what-if run: ``wall_s`` and ``cpu_s`` are medians over the repeats."""

    case: str
    gpus: int
    wall_s: float
    cpu_s: float
    step_time_s: float | None
    repeats: int


def what_if_cli_row(*, gpus: int = 16, repeats: int = 3, extra: Sequence[str] = ()) -> WhatIfBenchRow:
    """Wall time of the main job in a fresh interpreter, as a user types it."""
    command = [sys.executable, "-m", "experiments.what_if", "--gpus", str(gpus), *extra]
    wall, cpu = timed_command(command, repeats)
    return WhatIfBenchRow("what_if default (CLI)", gpus, wall, cpu, None, repeats)


def timed_command(command: Sequence[str], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``command`` run ``repeats`` times in a fresh interpreter."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")])),
    }
    # Start-up as a user sees it, from cached bytecode (the first run writes it; the median skips
    # that run): with caching turned off every start would compile each module again (~0.2 s more).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        before = os.times()
        start = time.perf_counter()
        subprocess.run(
            command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=600
        )
        walls.append(time.perf_counter() - start)
        after = os.times()
        cpus.append(
            (after.children_user - before.children_user) + (after.children_system - before.children_system)
        )
    return statistics.median(walls), statistics.median(cpus)


def fsdp_step_rows(
    gpu_counts: Sequence[int] = (16, 128, 1024),
    *,
    model: str = "llama2-7b",
    cluster: str = "dgx-a100",
    repeats: int = 3,
    progress: Any = None,
) -> list[WhatIfBenchRow]:
    """One FSDP step of ``model`` on ``cluster`` per GPU count (median wall and CPU seconds).

    ``progress`` (a tqdm bar or None) advances by one per GPU count.
    """
    workload = load_workload(model, seq_len=DEFAULT_CONFIG.seq_len, dtype=DEFAULT_CONFIG.dtype)
    rows = []
    for gpus in gpu_counts:
        # One micro-batch per GPU, so the global batch always divides.
        config = replace(DEFAULT_CONFIG, global_batch=gpus * DEFAULT_CONFIG.micro_batch)
        walls, cpus, step = [], [], None
        for _ in range(repeats):
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            result = run_what_if(
                workload, [cluster], [gpus], loader=load_cluster, strategies=["fsdp"], config=config
            )
            walls.append(time.perf_counter() - start_wall)
            cpus.append(time.process_time() - start_cpu)
            step = next(r.step_time_s for r in result.reports if r.gpus == gpus)
        rows.append(
            WhatIfBenchRow(
                f"fsdp step {model}", gpus, statistics.median(walls), statistics.median(cpus), step, repeats
            )
        )
        if progress is not None:
            progress.update(1)
    return rows


def parallel_step_row(*, gpus: int = 1024, repeats: int = 3) -> WhatIfBenchRow:
    """One 3-D parallel step of Llama-2-70B (see the module docstring), median wall and CPU seconds."""
    workload = load_workload("llama2-70b", seq_len=4096, dtype="bf16")
    config = TrainingConfig(global_batch=1024, micro_batch=1, seq_len=4096)
    layout = ParallelLayout(tp=8, pp=8, vpp=2)
    options = ParallelOptions(sequence_parallel=True)
    built = load_cluster("dgx-a100", gpus=gpus)
    walls, cpus, step = [], [], None
    for _ in range(repeats):
        topology = Topology(built.name, built.graph, list(built.ranks), dict(built.metadata))
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        result = simulate_parallel_step(workload, config, topology, "zero1", layout, options)
        walls.append(time.perf_counter() - start_wall)
        cpus.append(time.process_time() - start_cpu)
        step = result.report.step_time_s
    return WhatIfBenchRow(
        "3d step llama2-70b", gpus, statistics.median(walls), statistics.median(cpus), step, repeats
    )


def format_whatif_table(rows: Sequence[WhatIfBenchRow]) -> str:
    lines = [f"{'case':<24} {'gpus':>5} {'wall_s':>8} {'cpu_s':>8} {'sim_step_s':>10} {'repeats':>7}"]
    for r in rows:
        step = f"{r.step_time_s:>10.3f}" if r.step_time_s is not None else f"{'-':>10}"
        lines.append(f"{r.case:<24} {r.gpus:>5} {r.wall_s:>8.3f} {r.cpu_s:>8.3f} {step} {r.repeats:>7}")
    return "\n".join(lines)
