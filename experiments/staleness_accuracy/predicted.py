"""What the parameter-server simulation predicts for the staleness study: staleness and time per update.

The study's glue between :mod:`simcore.paramserver` (one simulated run) and the delayed-gradient
trainer: one cached run per (cluster, mode, bound, GPUs, seed) on the what-if's default model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from simcore.errors import TrainsimError
from simcore.paramserver import (
    DEFAULT_PS_STEPS,
    DEFAULT_STALENESS_BOUND,
    PSConfig,
    normalize_ps_mode,
    run_parameter_server,
)
from simcore.staleness.distribution import StalenessDistribution, staleness_from_histogram
from simcore.whatif.sweep import DEFAULT_CONFIG, DEFAULT_MODEL
from simcore.workload.loader import load_workload
from topologies import load_cluster

# Steps per simulated run: 32 keeps the start-up ramp (the first W gradients, computed on fresh
# parameters) to about 3% of the applied updates; past 16 GPUs the run is cut to about 512 gradients
# (at least the what-if's 8 steps), as simulation cost grows faster than linearly with the workers.
PREDICTION_STEPS = 32
PREDICTION_GRADIENTS = 512


def prediction_steps(gpus: int) -> int:
    """Steps simulated for a prediction on ``gpus`` workers (each step is one gradient per worker)."""
    return max(DEFAULT_PS_STEPS, min(PREDICTION_STEPS, PREDICTION_GRADIENTS // max(1, gpus)))


@dataclass(frozen=True, slots=True)
class PredictedRun:
    """What the parameter-server simulation predicts for one (cluster, mode, bound, GPUs, seed).

    ``distribution``: the staleness of the applied updates (server versions, see the module
    docstring). ``update_time_s``: simulated seconds per applied gradient, i.e. the time of the last
    update over the gradients applied (per-gradient samples / the run's throughput). That is the
    delayed-gradient trainer's unit: it applies one minibatch gradient per update in every mode, so
    a ps-sync round of W gradients counts as W updates. ``basis`` says what was simulated.
    """

    cluster: str
    mode: str
    staleness_bound: int
    gpus: int
    seed: int
    distribution: StalenessDistribution
    update_time_s: float
    step_time_s: float
    gradients_applied: int
    basis: str


def predicted_parameter_server(
    cluster: str, mode: str, staleness_bound: int | None, gpus: int, seed: int
) -> PredictedRun:
    """Staleness and time per update the parameter-server simulation predicts (one cached run).

    Runs :func:`simcore.paramserver.run_parameter_server` once per (cluster, mode, bound, gpus,
    seed) in a process: ``mode`` on ``cluster`` with ``gpus`` workers, SSP/mitigated with
    ``staleness_bound`` (None: :data:`simcore.paramserver.DEFAULT_STALENESS_BOUND`; sync and async
    ignore it), the what-if's default model and batch per GPU, default shards and placement,
    :func:`prediction_steps` steps. An unknown cluster or mode, or a bad GPU count, is a
    :class:`TrainsimError`.
    """
    name = normalize_ps_mode(mode)
    bound = DEFAULT_STALENESS_BOUND if staleness_bound is None else staleness_bound
    if name in ("sync", "async"):
        bound = DEFAULT_STALENESS_BOUND  # the bound plays no part: one run serves every bound
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise TrainsimError(f"parameter-server prediction: GPUs must be a whole number >= 1, got {gpus!r}")
    return _simulate(str(cluster), name, bound, gpus, seed)


@functools.lru_cache(maxsize=128)
def _simulate(cluster: str, mode: str, bound: int, gpus: int, seed: int) -> PredictedRun:
    """One simulated run, summarised; cached because the CLI asks for it per setting and for times."""
    training = replace(DEFAULT_CONFIG, global_batch=gpus * DEFAULT_CONFIG.micro_batch)
    workload = load_workload(DEFAULT_MODEL, seq_len=training.seq_len, dtype=training.dtype)
    steps = prediction_steps(gpus)
    ps = PSConfig(mode=mode, staleness_bound=bound, steps=steps)
    result = run_parameter_server(workload, cluster, gpus, ps, training, loader=load_cluster, seed=seed)
    if result.gradients_applied < 1 or result.throughput_samples_per_s <= 0:
        raise TrainsimError(f"parameter-server simulation of {mode} on {cluster} applied no updates")
    basis = (
        f"trainsim parameter-server simulation: {DEFAULT_MODEL}, micro-batch {training.micro_batch} "
        f"per GPU, {steps} steps, seed {seed}"
    )
    bounded = f", s={bound}" if mode in ("ssp", "mitigated") else ""
    label = f"simulated {mode} on {cluster}, {gpus} GPUs{bounded}"
    samples_per_gradient = training.global_batch / gpus
    return PredictedRun(
        cluster=cluster,
        mode=mode,
        staleness_bound=bound,
        gpus=gpus,
        seed=seed,
        distribution=staleness_from_histogram(dict(result.staleness_histogram), label, basis),
        update_time_s=samples_per_gradient / result.throughput_samples_per_s,
        step_time_s=result.step.step_time_s,
        gradients_applied=result.gradients_applied,
        basis=basis,
    )


def predicted_staleness(
    cluster: str, mode: str, staleness_bound: int | None, gpus: int, seed: int
) -> StalenessDistribution:
    """The staleness distribution the simulation predicts (see :func:`predicted_parameter_server`)."""
    return predicted_parameter_server(cluster, mode, staleness_bound, gpus, seed).distribution


def predicted_update_time_s(
    cluster: str, mode: str, staleness_bound: int | None, gpus: int, seed: int
) -> float:
    """Simulated seconds per applied gradient (see :func:`predicted_parameter_server`)."""
    return predicted_parameter_server(cluster, mode, staleness_bound, gpus, seed).update_time_s
