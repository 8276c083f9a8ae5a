"""What stale gradients cost in accuracy and in time to accuracy: real SGD with delayed gradients.

    python -m experiments.staleness_accuracy --quick
    python -m experiments.staleness_accuracy --delays 0,1,2,4,8,16 --seeds 5 --out report/
    python -m experiments.staleness_accuracy --measured runs/ps_async.jsonl --step-time sync=0.1 --step-time async=0.072
    python -m experiments.staleness_accuracy --cluster dgx-a100 --gpus 8 --ps-modes async,ssp,mitigated

Trains a small MLP on real data (scikit-learn's bundled digits, or a synthetic task of known Bayes
error) with gradients applied ``d`` server versions late, ``d`` drawn from (a) fixed delays,
(b) the distribution the parameter-server simulation predicts for a cluster and mode, and
(c) staleness measured in real asynchronous runs (calibrate.train JSONL). Time to accuracy is
updates to the target times the time per update: with ``--cluster``, each mode's simulated seconds
per applied gradient on that cluster (SSP per bound); ``--step-time MODE=TIME`` overrides a mode;
with neither, the seed study's ratios. The output states which basis it used. Prints the results
table, the verdict per PS mode on the cluster and per setting, and the seed study's figures beside
ours; ``--out`` adds a markdown report and seaborn plots. ``--fit-penalty FILE`` runs the penalty
study behind :func:`simcore.staleness.penalty.estimate_accuracy_penalty` and writes its coefficients.

The seed study: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from experiments.common.finite import require_finite
from experiments.common.progress import note
from experiments.staleness_accuracy.args import NORMAL, QUICK, TARGET_FRACTION_OF_SYNC, build_parser
from experiments.staleness_accuracy.data import Dataset, load_dataset
from experiments.staleness_accuracy.report import (
    ReportContext,
    StepTimes,
    SummaryRow,
    format_table,
    format_verdicts,
    markdown_report,
    paper_comparison,
    summarize,
    write_plots,
)
from experiments.staleness_accuracy.simulated import (
    parse_step_times,
    predicted_settings,
    predicted_source,
    simulated_runs,
    ssp_notes,
    time_basis,
)
from experiments.staleness_accuracy.trainer import Setting, SettingResult, TrainerConfig, run_settings
from simcore.cliargs import (
    output_dir,
)
from simcore.errors import TrainsimError, cli_entry
from simcore.output import write_json_atomic, write_text_atomic
from simcore.staleness.distribution import fixed_staleness, load_measured_staleness, staleness_from_histogram
from simcore.staleness.penalty import PenaltyObservation, fit_penalty_model

# numpy is imported inside the functions that use it, so --help does not load it.

__all__ = ["build_parser", "main", "run_penalty_study"]


# SGD updates of the small MLP, about 0.7 ms each on one core (the default study: ~70 k in ~50 s):
# the bound is about an hour; past NOTE_UPDATES (~2 s) the command says how much it trains.
MAX_UPDATES = 5_000_000
NOTE_UPDATES = 3_000


def _fixed_settings(delays: Sequence[int], modes: Sequence[str]) -> list[Setting]:
    settings = [Setting("sync", "sync", "sync", fixed_staleness(0, "sync"))]
    for delay in sorted(set(delays) - {0}):
        settings += [Setting(f"{mode} d={delay}", "fixed", mode, fixed_staleness(delay)) for mode in modes]
    return settings


def _measured_settings(paths: Sequence[str], modes: Sequence[str]) -> list[Setting]:
    settings = []
    for path in paths:
        dist = load_measured_staleness(path)
        settings += [Setting(f"{mode} meas:{Path(path).stem}"[:24], "measured", mode, dist) for mode in modes]
    return settings


def _resolve(args: argparse.Namespace) -> tuple[list[int], int, int]:
    defaults = QUICK if args.quick else NORMAL
    delays = args.delays or [int(d) for d in defaults.delays.split(",")]
    seeds = args.seeds if args.seeds is not None else defaults.seeds
    epochs = args.epochs if args.epochs is not None else defaults.epochs
    return delays, seeds, epochs


def _check_work(dataset: Dataset, config: TrainerConfig, runs: int, quiet: bool) -> None:
    """Refuse more than :data:`MAX_UPDATES` SGD updates in all; say how many when it takes a while."""
    per_run = config.epochs * -(-len(dataset.y_train) // config.batch_size)
    updates = runs * per_run
    why = f"{runs} training runs x {per_run} updates"
    if updates > MAX_UPDATES:
        raise TrainsimError(
            f"this would train {updates:,} SGD updates ({why}); at most {MAX_UPDATES:,}: "
            "use fewer --delays, --seeds or --epochs, or a larger --batch-size"
        )
    if updates > NOTE_UPDATES:
        note(f"this trains {updates:,} SGD updates ({why})", quiet=quiet)


def _write_outputs(
    out: Path, results: list[SettingResult], rows: list[SummaryRow], context: ReportContext
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "report.md", markdown_report(rows, context))
    payload = {
        "context": {
            "command": context.command,
            "dataset": context.dataset,
            "model": context.model,
            "target": context.target,
            "time_unit": context.step_times.unit,
        },
        "rows": [asdict(row) for row in rows],
    }
    write_json_atomic(out / "results.json", payload)
    written = [out / "report.md", out / "results.json"]
    written += write_plots(out, results, rows, context.target, context.step_times.unit)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)


# The penalty study behind simcore.staleness.penalty.estimate_accuracy_penalty: fixed delays give the penalty
# curve; long-tailed distributions (rare large delays, uniform spreads) decide how mean and p99
# combine into the effective staleness x = alpha * mean + (1 - alpha) * p99.
FIT_DELAYS = (1, 2, 3, 4, 6, 8, 12, 16)
FIT_SPIKES = ((0.05, 8), (0.05, 16), (0.05, 32), (0.2, 4), (0.2, 8), (0.2, 16))  # (share, delay)
FIT_UNIFORM = (4, 8, 16, 24)  # uniform over 0..D


def _penalty_study_settings() -> list[Setting]:
    tails = [staleness_from_histogram({0: 1 - w, d: w}, f"{w:.0%} at {d}", "tail") for w, d in FIT_SPIKES]
    tails += [
        staleness_from_histogram(dict.fromkeys(range(d + 1), 1.0), f"uniform 0..{d}", "tail")
        for d in FIT_UNIFORM
    ]
    settings = _fixed_settings([0, *FIT_DELAYS], ["async", "mitigated"])
    for mode in ("async", "mitigated"):
        settings += [Setting(f"{mode} {dist.label}", "tail", mode, dist) for dist in tails]
    return settings


def _observations(rows: Sequence[SummaryRow]) -> list[PenaltyObservation]:
    """The study's rows (sync first) as penalty observations; slowdown only where every seed got there."""
    sync_updates = rows[0].updates_to_target
    observations = []
    for r in rows[1:]:
        factor = None
        if r.reached == r.seeds and r.updates_to_target is not None and sync_updates:
            factor = r.updates_to_target / sync_updates
        observations.append(
            PenaltyObservation(
                r.name, r.mean_staleness, r.p99_staleness, r.penalty_points, factor, r.family == "fixed"
            )
        )
    return observations


def _fit_mode(rows: Sequence[SummaryRow]) -> dict[str, object]:
    """The penalty model for one mode, with the observations it was fitted to."""
    observations = _observations(rows)
    observed = [
        {"setting": o.label, "mean": round(o.mean_staleness, 3), "p99": o.p99_staleness,
         "penalty_points": round(o.penalty_points, 3), "penalty_std_points": round(100 * r.accuracy_std, 3)}
        for o, r in zip(observations, rows[1:], strict=True)
    ]  # fmt: skip
    return {**fit_penalty_model(observations), "observations": observed}


def run_penalty_study(
    path: Path,
    dataset: Dataset,
    config: TrainerConfig,
    seeds: int,
    argv: list[str] | None,
    *,
    quiet: bool = True,
) -> int:
    """Train the study's settings, fit the penalty model per mode, write it with its provenance."""
    import numpy as np

    settings = _penalty_study_settings()
    _check_work(dataset, config, len(settings) * seeds, quiet)
    results = run_settings(dataset, config, settings, seeds, quiet=quiet)
    sync_accuracy = float(results[0].final_accuracies.mean())
    target = round(TARGET_FRACTION_OF_SYNC * sync_accuracy, 3)
    rows = summarize(results, sync_accuracy, target, StepTimes())
    print(format_table(rows, target, StepTimes(unit="-")))
    fits = {
        mode: _fit_mode([rows[0], *(r for r in rows if r.mode == mode)]) for mode in ("async", "mitigated")
    }
    data = {
        "description": "ESTIMATED accuracy penalty (points vs sync) and slowdown to a target accuracy from gradient "
        "staleness, measured with delayed-gradient SGD on a small MLP; an order-of-magnitude guide, not a prediction "
        "for other models",
        "model": "x = alpha_mean * mean + (1 - alpha_mean) * p99 staleness; penalty and updates-to-target factor "
        "piecewise linear in x through the fixed-delay knots (monotone; null factor = target not reached)",
        "provenance": {
            "command": "python -m experiments.staleness_accuracy "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, "
            f"python {platform.python_version()}, numpy {np.__version__}",
        },
        "basis": {
            "dataset": dataset.description,
            "model": f"MLP {dataset.n_features}-{config.hidden}-{dataset.n_classes} (ReLU), plain SGD",
            "learning_rate": config.learning_rate,
            "batch_size": config.batch_size,
            "epochs": config.epochs,
            "seeds": seeds,
            "sync_accuracy": round(sync_accuracy, 4),
            "target_accuracy": target,
        },
        "valid_range": {"staleness_max": float(max(FIT_DELAYS))},
        "fits": fits,
    }
    write_json_atomic(path, data)
    for mode, fit in fits.items():
        print(
            f"{mode}: alpha_mean {fit['alpha_mean']}, spread-distribution rmse {fit['rmse_points_spread']} pts"
        )
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _fit_penalty_path(args: argparse.Namespace) -> Path:
    path: Path = args.fit_penalty
    if path.is_dir():
        raise TrainsimError(f"--fit-penalty {str(path)!r} is a folder; give the JSON file to write")
    if path.exists() and not args.force:
        raise TrainsimError(f"--fit-penalty {str(path)!r} exists; add --force to replace it")
    return path


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    delays, seeds, epochs = _resolve(args)
    config = TrainerConfig(
        hidden=args.hidden, learning_rate=args.lr, batch_size=args.batch_size, epochs=epochs
    )
    if args.fit_penalty:
        path = _fit_penalty_path(args)
        return run_penalty_study(path, load_dataset(args.dataset), config, seeds, argv, quiet=args.quiet)
    out = output_dir(args.out, force=args.force)
    notes: list[str] = []
    given_times = parse_step_times(args.step_time)
    dataset = load_dataset(args.dataset)
    runs = []
    if args.cluster:
        if args.gpus > 64:
            note(f"simulating the parameter server with {args.gpus} workers takes a while", quiet=args.quiet)
        runs = simulated_runs(args.cluster, args.gpus, args.ps_modes, args.staleness_bounds)
        notes += [predicted_source(args.cluster, args.gpus, runs), *ssp_notes(args.cluster, args.gpus, runs)]
    else:
        notes.append("(b) simulator-predicted staleness not run: give --cluster NAME --gpus N")
    settings = (
        _fixed_settings(delays, args.modes)
        + predicted_settings(runs)
        + _measured_settings(args.measured, args.modes)
    )
    _check_work(dataset, config, len(settings) * seeds, args.quiet)
    step_times = time_basis(args.cluster, args.gpus, runs, given_times)
    results = run_settings(dataset, config, settings, seeds, quiet=args.quiet)
    sync_accuracy = float(results[0].final_accuracies.mean())
    target = args.target if args.target is not None else round(TARGET_FRACTION_OF_SYNC * sync_accuracy, 3)
    rows = summarize(results, sync_accuracy, target, step_times)
    require_finite([asdict(row) for row in rows], "the staleness study")
    print(f"dataset: {dataset.description}")
    print(
        f"model: MLP hidden={config.hidden}, SGD lr={config.learning_rate}, batch {config.batch_size}, "
        f"{epochs} epochs, {seeds} seeds"
    )
    print(f"time basis: {step_times.source}")
    print(format_table(rows, target, step_times))
    cluster = f"{args.cluster}, {args.gpus} GPUs" if args.cluster else ""
    print(format_verdicts(rows, cluster))
    print("the seed study (Ovi, arXiv 2505.12832, 2025) beside this one:")
    for quantity, paper, ours in paper_comparison(rows, step_times):
        print(f"  {quantity}: paper {paper}; here {ours}")
    for note_line in notes:
        print(f"note: {note_line}")
    if out is not None:
        command = "python -m experiments.staleness_accuracy " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        model = (
            f"MLP {dataset.n_features}-{config.hidden}-{dataset.n_classes} (ReLU), plain SGD lr {config.learning_rate}, "
            f"batch {config.batch_size} per update, {epochs} epochs, seeds 0..{seeds - 1}"
        )
        _write_outputs(
            out,
            results,
            rows,
            ReportContext(
                command.strip(),
                dataset.description,
                dataset.why,
                model,
                target,
                step_times,
                tuple(notes),
                cluster,
            ),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
