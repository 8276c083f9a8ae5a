"""PSResult: a parameter-server run as a what-if record (StepReport's fields plus staleness).

Definitions (times in seconds, sizes in bytes):

- a *step* is one gradient per worker: a barrier round in ps-sync; in the asynchronous modes the
  interval in which W more gradients were applied (step i ends when gradient i * W is applied).
  ``samples_per_s`` is the run's sustained throughput (``throughput_samples_per_s`` below, the
  figure the detail line prints) and ``step_time_s`` = global_batch / samples_per_s, the mean step
  over the run; ``step_time_p99_s`` is the p99 over the run's steps. The mean, not the median, as
  the table's figure: a straggler's or a blocked worker's slow steps count in full, so the table
  cell, the detail line and the recommendation (which ranks by throughput) give one number.
- ``throughput_samples_per_s``: the run's steady state: gradients applied after the first step
  (ps-sync: its first round; the asynchronous modes: the first W gradients) x samples per
  gradient / the time from that step's end to the run's last update. The first step is left out
  because it starts from parameters already in place (no pull before it), which a long run has
  once only. An asynchronous run ends when its budget of
  ``steps * W`` gradients is applied, with every worker still at work (gradients in flight then
  are not counted), so this is the rate of a long run, not one that ends with a drain in which
  the last gradients land one by one, a slow worker's last: in a run of a few steps such a drain
  dominates and ranks the modes by which worker happens to hold the last gradients (see
  :mod:`simcore.paramserver.modes` for a case where it made ps-mitigated look faster than
  ps-async). It is exact to within one round of the workers' gradients.
- ``compute_s``: the step with infinitely fast links and servers: the slowest worker's gradient in
  ps-sync; W / sum(1 / t_w) in the asynchronous modes (the workers' combined rate).
- ``comm_s``: mean time per gradient a worker had pushes or pulls in flight; ``comm_bytes``: bytes a
  worker pushes and pulls per gradient.
- ``staleness``: per applied gradient, the shard's version when its update starts minus the version
  the worker pulled before computing it (the largest over the gradient's shards); ``{mean, p50,
  p99, max}`` and ``staleness_histogram`` ``{delay: count}``. ``clock_lag_max``: the largest SSP
  clock lag (worker clock minus the slowest's when a gradient starts).
- ``ssp_blocking_s``: per worker, seconds blocked at the SSP gate. ``sync_overhead_s``: per worker,
  seconds spent in ps-mitigated's version checks, re-pulls and recomputes; ``recomputes`` in all.
- ``shard_imbalance``: hot-shard parameters / mean per shard; ``server_busy``: the busiest shard's
  update time / run time.
- ``link_utilisation``: {link kind: utilisation of the busiest link of that kind over the run};
  ``bottleneck_link``: the link with the most bytes for its bandwidth, at
  ``bottleneck_utilisation``; ``busiest_links``: the five most utilised links over the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simcore.compute.memory import MemoryPeak
from simcore.hardware import device_spec
from simcore.paramserver.config import MODES
from simcore.paramserver.footprint import activation_bytes, served_params_per_worker, server_peak, worker_peak
from simcore.paramserver.simulate import PSOutcome
from simcore.report import StepReport
from simcore.strategies.base import model_flops_per_step
from simcore.strategies.runner import percentile  # linear, like numpy's default, without numpy.ma

__all__ = ["PSResult", "staleness_summary", "step_times", "summarise", "sustained_samples_per_s"]


@dataclass(frozen=True, slots=True)
class PSResult:
    """One parameter-server point: its :class:`StepReport` and what only a parameter server has."""

    step: StepReport
    mode: str
    shards: int
    placement: str
    staleness_bound: int
    staleness: Mapping[str, float]
    staleness_histogram: Mapping[int, int]
    ssp_blocking_s: tuple[float, ...]
    sync_overhead_s: tuple[float, ...]
    recomputes: int
    clock_lag_max: int
    shard_imbalance: float
    server_busy: float
    throughput_samples_per_s: float
    bottleneck_utilisation: float
    busiest_links: Mapping[str, float]
    gradients_applied: int
    step_times_s: tuple[float, ...]
    mixed_devices: bool

    def to_record(self) -> dict[str, Any]:
        """StepReport's record plus the parameter-server fields (JSON-ready: string histogram keys)."""
        record = self.step.to_record()
        record.update(
            mode=self.mode,
            ps_shards=self.shards,
            ps_placement=self.placement,
            staleness_bound=self.staleness_bound,
            staleness=dict(self.staleness),
            staleness_histogram={str(k): v for k, v in sorted(self.staleness_histogram.items())},
            ssp_blocking_s=list(self.ssp_blocking_s),
            sync_overhead_s=list(self.sync_overhead_s),
            recomputes=self.recomputes,
            clock_lag_max=self.clock_lag_max,
            shard_imbalance=self.shard_imbalance,
            server_busy=self.server_busy,
            throughput_samples_per_s=self.throughput_samples_per_s,
            bottleneck_utilisation=self.bottleneck_utilisation,
            busiest_links=dict(self.busiest_links),
            gradients_applied=self.gradients_applied,
        )
        return record


def step_times(outcome: PSOutcome) -> list[float]:
    """Seconds per step (see the module docstring for what a step is in each mode)."""
    rec = outcome.records
    if MODES[outcome.config.mode].barrier:
        ends = rec.step_end_s
    else:
        w = outcome.workers
        ends = [rec.applied_s[i] for i in range(w - 1, len(rec.applied_s), w)]
    return [float(b - a) for a, b in zip([0.0, *ends[:-1]], ends, strict=True)]


def sustained_samples_per_s(outcome: PSOutcome) -> float:
    """Samples per second of the run's steady state (see the module docstring): the gradients
    applied after its first step, over the time from the first step's end to the last update.
    A run with nothing after its first step counts from time 0."""
    rec, w = outcome.records, outcome.workers
    per_gradient = outcome.training.global_batch / w
    if MODES[outcome.config.mode].barrier:  # ends of rounds, W gradients each
        ends, per_end, skip = list(rec.step_end_s), w, 1
    else:  # one end per applied gradient; the first step is the first W of them
        ends, per_end, skip = list(rec.applied_s), 1, w
    if len(ends) > skip and ends[-1] > ends[skip - 1]:
        return (len(ends) - skip) * per_end * per_gradient / (ends[-1] - ends[skip - 1])
    end = ends[-1] if ends else 0.0
    return len(ends) * per_end * per_gradient / end if end > 0 else 0.0


def staleness_summary(samples: Sequence[int]) -> dict[str, float]:
    """``{mean, p50, p99, max}`` of the applied gradients' staleness (zeros when none)."""
    if not samples:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    values = [float(v) for v in samples]
    return {
        "mean": math.fsum(values) / len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
    }


def _compute_only_s(outcome: PSOutcome) -> float:
    times = outcome.compute_s
    if MODES[outcome.config.mode].barrier:
        return max(times)
    return len(times) / math.fsum(1.0 / t for t in times)


def _memory(outcome: PSOutcome) -> MemoryPeak:
    """The tightest peak (largest fraction of its device) over workers and dedicated server devices."""
    topo, w = outcome.topology, outcome.workers
    accumulate = MODES[outcome.config.mode].barrier
    served = served_params_per_worker(outcome.server_devices, outcome.layout.shard_params, topo.ranks[:w])
    training, workload = outcome.training, outcome.workload
    activations = activation_bytes(workload, training.micro_batch, training.activation_checkpointing)
    params = workload.params
    peaks = []
    for rank in range(w):
        capacity = device_spec(topo.gpu_spec_name(rank) or "cpu").memory_bytes
        peaks.append(
            worker_peak(
                training,
                capacity,
                served[rank],
                params=params,
                activations=activations,
                accumulate=accumulate,
            )
        )
    hosted: dict[str, int] = {}
    for device, params in zip(outcome.server_devices, outcome.layout.shard_params, strict=True):
        if device not in topo.ranks[:w]:
            hosted[device] = hosted.get(device, 0) + params
    for device, params in sorted(hosted.items()):
        capacity = device_spec(str(topo.node(device).get("gpu", "")) or "cpu").memory_bytes
        peaks.append(server_peak(outcome.training, capacity, params, accumulate=accumulate))
    return max(peaks, key=lambda p: (p.peak_bytes / p.capacity_bytes, p.peak_bytes))


def _step_report(outcome: PSOutcome, cluster: str, times: Sequence[float]) -> StepReport:
    cfg, workload, w = outcome.training, outcome.workload, outcome.workers
    rec = outcome.records
    samples_per_s = sustained_samples_per_s(outcome)
    p99 = percentile(times, 99)
    # A run with nothing applied has no rate; its steps' median stands in (never 0 or inf).
    mean = cfg.global_batch / samples_per_s if samples_per_s > 0 else percentile(times, 50)
    samples_per_s = cfg.global_batch / mean
    device = outcome.topology.gpu_spec_name(0) or "cpu"
    peak_flops = device_spec(device).flops(cfg.dtype)
    compute_s = _compute_only_s(outcome)
    peak = _memory(outcome)
    gradients = max(1, sum(rec.gradients))
    per_gradient_bytes = math.fsum(
        p * (cfg.grad_bytes + cfg.param_bytes) for p in outcome.layout.shard_params
    )
    return StepReport(
        cluster=cluster,
        strategy=outcome.config.mode,
        gpus=w,
        model=workload.name,
        device=device,
        global_batch=cfg.global_batch,
        micro_batch=cfg.micro_batch,
        accumulation_steps=cfg.accumulation_steps(w),
        step_time_s=mean,
        step_time_p99_s=max(p99, mean),
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * workload.tokens_per_sample if workload.tokens_per_sample else None,
        scaling_efficiency=None,
        baseline_fits=None,
        mfu=model_flops_per_step(workload, cfg.global_batch) / (w * peak_flops * mean),
        compute_s=compute_s,
        exposed_comm_s=max(0.0, mean - compute_s),
        comm_s=math.fsum(rec.comm_s) / gradients,
        comm_bytes=per_gradient_bytes,
        peak_memory_bytes=peak.peak_bytes,
        peak_phase=peak.phase,
        memory_breakdown=dict(peak.breakdown),
        memory_capacity_bytes=float(peak.capacity_bytes),
        fits=peak.fits,
        oom_verdict=peak.verdict(),
        link_utilisation=dict(sorted(outcome.link_utilisation.items())),
        bottleneck_link=outcome.bottleneck_link,
    )


def summarise(outcome: PSOutcome, *, cluster: str) -> PSResult:
    """The :class:`PSResult` of a simulated run."""
    rec, cfg = outcome.records, outcome.config
    times = step_times(outcome)
    histogram: dict[int, int] = {}
    for value in rec.staleness:
        histogram[value] = histogram.get(value, 0) + 1
    elapsed = outcome.elapsed_s
    return PSResult(
        step=_step_report(outcome, cluster, times),
        mode=cfg.mode,
        shards=outcome.layout.shards,
        placement=cfg.placement.describe(),
        staleness_bound=cfg.staleness_bound,
        staleness=staleness_summary(rec.staleness),
        staleness_histogram=histogram,
        ssp_blocking_s=tuple(rec.blocking_s),
        sync_overhead_s=tuple(rec.check_s),
        recomputes=sum(rec.recomputes),
        clock_lag_max=max(rec.clock_lag, default=0),
        shard_imbalance=outcome.layout.imbalance,
        server_busy=max(outcome.shard_busy_s, default=0.0) / elapsed if elapsed > 0 else 0.0,
        throughput_samples_per_s=sustained_samples_per_s(outcome),
        bottleneck_utilisation=outcome.bottleneck_utilisation,
        busiest_links=dict(outcome.busiest_links),
        gradients_applied=len(rec.applied_s),
        step_times_s=tuple(times),
        mixed_devices=len({outcome.topology.gpu_spec_name(r) for r in range(outcome.workers)}) > 1,
    )
