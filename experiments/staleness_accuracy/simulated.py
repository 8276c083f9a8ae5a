"""What the parameter-server simulation gives the staleness study: (b)'s distributions and the time basis.

For a cluster and GPU count, each parameter-server mode is simulated once
(:func:`experiments.staleness_accuracy.predicted.predicted_parameter_server`, cached): its staleness histogram becomes a
trained setting, and its simulated seconds per applied gradient become that mode's time per update,
so time to accuracy is updates to the target times simulated time. ``--step-time MODE=TIME``
overrides a whole mode. Without a cluster and without ``--step-time`` the seed study's ratios are
the only basis, in units of one synchronous update.

The seed study: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from experiments.staleness_accuracy.predicted import PredictedRun, predicted_parameter_server
from experiments.staleness_accuracy.report import StepTimes
from experiments.staleness_accuracy.trainer import Setting
from simcore.errors import TrainsimError
from simcore.paramserver import normalize_ps_mode
from simcore.units import parse_time

__all__ = [
    "PAPER_RELATIVE_STEP_TIMES",
    "PREDICTION_SEED",
    "parse_step_times",
    "predicted_name",
    "predicted_settings",
    "predicted_source",
    "simulated_runs",
    "ssp_notes",
    "time_basis",
]

# Time per update when neither --step-time nor the simulator gives one: the seed study's ratios
# (async PS "reduced training time by up to 28%"; the mitigating protocol's overhead "negated
# throughput gains"), relative to one synchronous update. SSP has no figure there.
PAPER_RELATIVE_STEP_TIMES = {"sync": 1.0, "async": 0.72, "mitigated": 1.0}
PREDICTION_SEED = 0  # the simulation's seed for (b) and for the simulated times
TIMED_MODES = ("sync", "async", "mitigated")  # modes the fixed-delay and measured settings run in


def simulated_runs(
    cluster: str, gpus: int, modes: Sequence[str], ssp_bounds: Sequence[int]
) -> list[PredictedRun]:
    """One simulated run per mode, SSP once per bound (mitigated at the default bound)."""
    runs = []
    for mode in modes:
        bounds: Sequence[int | None] = ssp_bounds if normalize_ps_mode(mode) == "ssp" else [None]
        runs += [predicted_parameter_server(cluster, mode, b, gpus, PREDICTION_SEED) for b in bounds]
    return runs


def predicted_name(run: PredictedRun) -> str:
    """The setting's name in the tables: ``pred async``, ``pred ssp s=2``, ``pred mitigated``."""
    return f"pred {run.mode}" + (f" s={run.staleness_bound}" if run.mode == "ssp" else "")


def predicted_settings(runs: Sequence[PredictedRun]) -> list[Setting]:
    """(b): each simulated run's staleness distribution, trained in its mode."""
    return [Setting(predicted_name(run), "predicted", run.mode, run.distribution) for run in runs]


def predicted_source(cluster: str, gpus: int, runs: Sequence[PredictedRun]) -> str:
    """Where the ``pred`` rows' staleness comes from (one line for the notes)."""
    sources = ", ".join(dict.fromkeys(run.distribution.source for run in runs))
    return f"(b) staleness of the pred rows: {sources}, on {cluster} with {gpus} GPUs"


def parse_step_times(items: Sequence[str]) -> dict[str, float]:
    """``--step-time MODE=TIME`` values: seconds per update by plain mode name."""
    given: dict[str, float] = {}
    for item in items:
        mode, sep, value = item.partition("=")
        if not sep:
            raise TrainsimError(f"--step-time: expected MODE=TIME (e.g. async=72ms), got {item!r}")
        seconds = parse_time(value)
        if seconds <= 0:
            raise TrainsimError(f"--step-time: time per update must be > 0, got {item!r}")
        given[normalize_ps_mode(mode)] = seconds
    return given


def _simulated_times(
    cluster: str, gpus: int, runs: Sequence[PredictedRun], given: Mapping[str, float]
) -> StepTimes:
    """Seconds per applied gradient from the simulation; a ``--step-time`` mode replaces its runs' times."""
    timed = {
        mode: predicted_parameter_server(cluster, mode, None, gpus, PREDICTION_SEED) for mode in TIMED_MODES
    }
    by_mode = {mode: run.update_time_s for mode, run in timed.items()}
    by_setting = {predicted_name(run): run.update_time_s for run in runs if run.mode not in given}
    sync = timed["sync"]
    source = (
        f"simulated seconds per applied gradient on {cluster}, {gpus} GPUs ({sync.basis}; "
        f"SSP per bound, mitigated at s={timed['mitigated'].staleness_bound})"
    )
    label = f"simulated, {cluster} {gpus} GPUs"
    if given:
        source += f"; --step-time for {', '.join(given)}"
        label += f"; --step-time for {', '.join(given)}"
    return StepTimes({**by_mode, **given}, "s", source, by_setting, label)


def time_basis(
    cluster: str | None, gpus: int, runs: Sequence[PredictedRun], given: Mapping[str, float]
) -> StepTimes:
    """Time per update: simulated for ``cluster`` (``given`` overriding modes), else ``given``, else the paper's ratios."""
    if cluster:
        return _simulated_times(cluster, gpus, runs, given)
    if given:
        return StepTimes(dict(given), "s", f"--step-time for {', '.join(given)}", label="--step-time")
    ratios = ", ".join(f"{m} {t:.2f}" for m, t in PAPER_RELATIVE_STEP_TIMES.items() if m != "sync")
    return StepTimes(
        PAPER_RELATIVE_STEP_TIMES,
        "x sync update",
        f"the seed study's ratios ({ratios} x sync; Ovi, arXiv 2505.12832, 2025); "
        "give --cluster or --step-time for seconds",
        label="seed study ratios",
    )


def ssp_notes(cluster: str, gpus: int, runs: Sequence[PredictedRun]) -> list[str]:
    """A note when SSP never blocked: its staleness and time are then exactly async's."""
    async_run = predicted_parameter_server(cluster, "async", None, gpus, PREDICTION_SEED)
    same = [
        str(run.staleness_bound)
        for run in runs
        if run.mode == "ssp"
        and run.distribution.delays == async_run.distribution.delays
        and run.distribution.probabilities == async_run.distribution.probabilities
        and run.update_time_s == async_run.update_time_s
    ]
    if not same:
        return []
    return [
        f"(b) SSP s={','.join(same)} predicts exactly async's staleness and time on {cluster} with "
        f"{gpus} GPUs: no worker got more than s clocks ahead, so the gate never blocked (SSP "
        "bounds clock lag, not server versions: staleness stays about W-1 versions)"
    ]
