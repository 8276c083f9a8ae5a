"""Per-rank memory: the simulator's memory model against PyTorch's own accounting.

    python -m experiments.validate_memory --quick
    python -m experiments.validate_memory --out report/            # GPT-2 small, BERT-base, ResNet-50; W = 1..64
    python -m experiments.validate_memory --measured runs/memory_truth.jsonl --out report/

Measures (:mod:`calibrate.memory_truth`: one real DDP or FSDP2 step as rank 0 of a fake process
group of W ranks, under torch's ``MemTracker`` / ``FSDPMemTracker``) or reads such records, then runs
the simulator's memory model for the *same* configuration and prints, per (model, strategy, world
size, workload source), the measured and predicted peak and each category with its error. The
goal is the peak within :data:`PEAK_GOAL` (5 %).

The simulated setup is the measured one:

- workload: ``source = "import"`` traces the very module measured
  (``load_workload("calibrate.memory_truth:gpt2_small", seq_len=128, dtype="fp32")``);
  ``"preset"`` uses the simulator's formula preset of the same architecture where one exists;
- training: fp32 everywhere (no master weights), the same optimizer, micro-batch = the measured
  batch with no accumulation; DDP with torch's defaults (25 MiB buckets, 1 MiB first bucket,
  ``gradient_as_bucket_view=False``); FSDP per block plus the root, ``reshard_after_forward``,
  prefetch 1 (what FSDP2 does);
- ``allocator_overhead_bytes = 0``: the trackers count tensor storages and nothing else (no CUDA
  context, workspaces or allocator fragmentation exist on this CPU testbed), so the simulator's
  ``overhead`` category, which models exactly those, is set to zero rather than to its 1 GiB GPU
  default;
- collectives take zero time: the fake process group completes every collective at once, so
  nothing waits on communication (the memory timeline depends on timing only through ordering;
  the compute times come from the generic ``cpu`` device spec).

The measured ``temp`` category (backward temporaries such as gradients of activations, and the
optimizer step's transients) is predicted by the simulator's ``temp`` category: the partial
gradients of tied parameters and the optimizer step's scratch tensors (torch's default on CPU,
the single-tensor loop); gradients of activations and other backward workspaces are not modelled. Category
cells show measured/predicted MB and (predicted - measured) as a share of the measured peak, so
they add up to the peak error; ``fwd act`` checks the activation model on its own (activations held
at the end of forward against the workload's saved bytes times the batch), whatever phase the peak
falls in. With
``--out DIR``: ``memory_truth.jsonl`` (when measured here), ``memory_comparison.json``,
``memory_report.md``, ``memory_peak.png`` and ``memory_categories.png`` (the rows and their
rendering live in :mod:`experiments.validate_memory.report`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from calibrate.common.records import RecordWriter, atomic_write_json, read_records
from calibrate.memory_truth.options import MODEL_NAMES, parse_list
from experiments.validate_memory.args import FULL_MODELS, QUICK_MODELS, SOURCES, build_parser
from experiments.validate_memory.report import (
    CATEGORIES,
    PEAK_GOAL,
    ComparisonRow,
    format_table,
    markdown_report,
    summary,
    write_plots,
)
from simcore.cliargs import output_dir
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError, cli_entry
from simcore.hardware import device_spec
from simcore.output import write_text_atomic
from simcore.procs import die_with_parent
from simcore.progress import bar, note
from simcore.strategies import get_strategy
from simcore.strategies.base import CommCost, StepContext, TrainingConfig
from simcore.strategies.runner import simulate_step
from simcore.workload.loader import load_workload

__all__ = [
    "CATEGORIES",
    "PEAK_GOAL",
    "ComparisonRow",
    "compare",
    "format_table",
    "main",
    "markdown_report",
    "predict",
    "write_plots",
]

QUICK_WORLD_SIZES = (1, 2, 4)
FULL_WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _workload(record: Mapping[str, Any], source: str) -> Any:
    seq_len = record.get("seq_len") or None
    image = record.get("image_size") or None
    if source == "preset":
        return load_workload(str(record["preset"]), seq_len=seq_len, image_size=image, dtype="fp32")
    shape = {"seq_len": seq_len} if seq_len else {"input_shape": (3, int(str(image)), int(str(image)))}
    return load_workload(str(record["factory"]), dtype="fp32", **shape)


def predict(record: Mapping[str, Any], workload: Any) -> tuple[float, dict[str, float], str]:
    """The simulator's per-rank peak, its breakdown (our categories) and phase for a measured record."""
    world, batch = int(record["world_size"]), int(record["batch"])
    config = TrainingConfig(
        global_batch=batch * world,
        micro_batch=batch,
        seq_len=record.get("seq_len") or None,
        dtype="fp32",
        optimizer=str(record["optimizer"]),
        master_weights=False,
        allocator_overhead_bytes=0,
        gradient_as_bucket_view=False,
        prefetch=1,
        reshard_after_forward=True,
        wrap="per-block",
    )
    ranks = tuple(range(world))
    ctx = StepContext(
        workload,
        config,
        world,
        ComputeModel(device_spec("cpu"), "fp32"),
        lambda op, size, group: CommCost(0.0),
        ranks,
        ranks,
        (0,),
        2**62,
    )
    peak = simulate_step(get_strategy(str(record["strategy"])), ctx).run.memory.peak()
    breakdown = {c: float(peak.breakdown.get(c, 0.0)) for c in CATEGORIES}
    return float(peak.peak_bytes), breakdown, peak.phase


def compare(records: Sequence[Mapping[str, Any]], sources: Sequence[str] = SOURCES) -> list[ComparisonRow]:
    """Predict every record with each workload source (presets only where the model copies one)."""
    cache: dict[tuple[str, str, Any, Any], Any] = {}
    rows = []
    for record in records:
        if record.get("kind") != "memory_truth":
            continue
        for source in sources:
            if source == "preset" and not record.get("preset"):
                continue
            key = (source, str(record["factory"]), record.get("seq_len"), record.get("image_size"))
            if key not in cache:
                cache[key] = _workload(record, source)
            peak, breakdown, phase = predict(record, cache[key])
            forward = record.get("after_forward") or {}
            rows.append(
                ComparisonRow(
                    str(record["model"]),
                    str(record["strategy"]),
                    int(record["world_size"]),
                    source,
                    float(record["peak_bytes"]),
                    peak,
                    {c: float(record["measured"].get(c, 0)) for c in CATEGORIES},
                    breakdown,
                    str(record.get("peak_phase", "")),
                    phase,
                    float(forward["activations"]) if "activations" in forward else None,
                    float(cache[key].activation_bytes_per_sample * int(record["batch"])),
                )
            )
    return rows


def measure_point(name: str, strategy: str, world: int, optimizer: str) -> dict[str, Any]:
    """One measured configuration (run in a child process of its own: see :func:`_measure`)."""
    from calibrate.memory_truth import measure as memory_truth  # torch: only when measuring here

    return memory_truth.measure_grid([name], [strategy], [world], optimizer=optimizer)[0]


def _measure(args: argparse.Namespace, out_dir: Path | None) -> list[dict[str, Any]]:
    """Measure every configuration, each in a fresh child process, one at a time.

    A tracked step leaves torch's allocator caches, the traced module and the tracker's records
    behind: measured in one process the grid grew to 13 GB (gpt2-small alone went from 1.2 to
    2.8 GB resident between its first two configurations). A child per configuration returns all
    of it when it exits; the parent keeps only the records, appending each as it arrives.
    """
    import concurrent.futures
    import multiprocessing

    models = parse_list(args.models or ",".join(QUICK_MODELS if args.quick else FULL_MODELS), MODEL_NAMES,
                        "--models")  # fmt: skip
    worlds = args.world_sizes or list(QUICK_WORLD_SIZES if args.quick else FULL_WORLD_SIZES)
    points = [(m, s, w, args.optimizer) for m in models for s in args.strategies for w in worlds]
    note(f"measuring {len(points)} configuration(s), each in a process of its own", quiet=args.quiet)
    writer = RecordWriter(out_dir / "memory_truth.jsonl") if out_dir is not None else None
    records = []
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited to release
    try:
        with bar(len(points), "memory truth", quiet=args.quiet, unit="config") as counter:
            for name, strategy, world, optimizer in points:
                counter.set_postfix_str(f"{name} {strategy} W={world}", refresh=True)
                with concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=spawn, initializer=die_with_parent, initargs=(os.getpid(),)
                ) as pool:  # one child each, killed by Linux if this process dies (kill -9, SIGTERM)
                    record = pool.submit(measure_point, name, strategy, world, optimizer).result()
                records.append(record)
                if writer is not None:
                    writer.write(record)
                counter.update(1)
    finally:
        if writer is not None:
            writer.close()
    return records


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sources = args.sources
    if args.measured:
        if not Path(args.measured).is_file():
            raise TrainsimError(f"--measured: no such file {args.measured!r}")
    elif importlib.util.find_spec("torch") is None:
        raise TrainsimError(
            "measuring needs torch (pip install torch); --measured FILE compares records measured elsewhere"
        )
    out_dir = output_dir(args.out, force=args.force)
    if args.measured:
        records = [r for r in read_records(args.measured) if r.get("kind") == "memory_truth"]
        if not records:
            raise TrainsimError(f"--measured: {args.measured!r} holds no memory_truth records")
    else:
        records = _measure(args, out_dir)
    order = {name: index for index, name in enumerate(dict.fromkeys(str(r["model"]) for r in records))}
    rows = sorted(
        compare(records, sources), key=lambda r: (order[r.model], r.strategy, r.world_size, r.source)
    )
    if not rows:
        raise TrainsimError(
            f"no measured configuration has a {' or '.join(sources)} workload to compare "
            f"({', '.join(sorted(order))}); --sources import compares every model"
        )
    print(format_table(rows))
    for source, s in summary(rows).items():
        forward = s.get("forward_activation_mape")
        print(
            f"{source}: peak within {PEAK_GOAL:.0%} on {s['within_goal']:.0f}/{s['configurations']:.0f}; "
            f"MAPE {s['peak_mape']:.1%}; max |error| {s['peak_max_abs_error']:.1%}; "
            f"end-of-forward activations MAPE {'n/a' if forward is None else format(forward, '.1%')}"
        )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            out_dir / "memory_comparison.json",
            {"rows": [asdict(r) | {"peak_error": r.peak_error} for r in rows], "summary": summary(rows)},
        )
        write_text_atomic(out_dir / "memory_report.md", markdown_report(rows, records))
        for path in write_plots(rows, out_dir):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
