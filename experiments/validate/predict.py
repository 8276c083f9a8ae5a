"""Turn a measured training run into the simulator's prediction of it, from the calibration alone.

Nothing here looks at a training run's timings: a prediction uses the run's *configuration*
(strategy, world size, batch, the model's layers as ``calibrate.train.models.describe`` recorded
them in the run's provenance, the slow rank) and the calibration profile of the microbenchmarks.
The measured step time is read only to be compared (:func:`measured_step`).

How the measured setup is modelled (each choice says why):

- **Workload**: the layers ``describe()`` measured on the very torch module that trained (forward
  hooks on one sample), fp32. ``describe`` counts the weights in a layer's per-sample
  ``memory_bytes``; the simulator adds weight traffic itself, so they are taken out here.
- **Layers**: the roofline with the profile's matmul rate prices FLOPs, and the profile's
  per-operator overhead (``op_overhead_s``, from the op-chain benchmark) times each layer kind's
  operator count prices the framework's dispatch (:mod:`simcore.compute.roofline`); neither sees
  non-matmul kernels' own inefficiency. ``calibrate.compute``'s layer benchmarks time
  whole layers of each kind, forward and backward; the ratio of their measured to their modelled
  time (:func:`layer_corrections`) multiplies every layer of that kind, that of the benchmarked
  shape nearest the layer in arithmetic intensity and size where a kind has several
  (:class:`LayerCorrectedTimer`). Microbenchmarks only, as the rest of the profile.
- **Ranks**: CPU processes (device ``cpu``) whose compute rate and memory bandwidth come from the
  profile. Calibration ran two single-threaded ranks on this machine's cores at once, so its rates
  are per core under the machine's own load. When more ranks compute at once than there are cores
  (``ranks_busy``: every rank for DDP/FSDP, the workers for a parameter server, whose server idles
  while they compute), the OS time-slices them: each rank's compute is slowed by
  ``1 / min(1, cores / ranks_busy)``. That holds for ranks that compute at the same moment (every
  rank of a DDP/FSDP step, the workers of a synchronous round); asynchronous and SSP workers drift
  apart and compute while the others push, pull or wait, so each is slowed by the threads busy
  beside it on average, solved to the fixed point with the simulation's own busy fractions
  (:mod:`simcore.compute.core_sharing`). The machine is shared with other jobs, so their busy threads
  count too: a CPU-share probe (a busy loop timed just before and after each run, never the run
  itself) estimates them; :func:`predict` with ``idle=True`` leaves them out. The calibration's
  short microbenchmarks report medians, which a time-sliced process reaches between preemptions,
  so they measure the speed of a core while it runs, not the share of it a process gets.
- **Communication under load**: gloo over loopback is CPU work (copies, reductions, the kernel's
  TCP path). The collectives job ran all the run's ranks at once, so its fits already include the
  ranks sharing the cores among themselves; what they lack is the background load, so loopback
  collective times and link figures are slowed by ``slowdown(workers + background) /
  slowdown(workers)``. A tc-shaped NIC's rate is not CPU work and is left as shaped.
- **Links**: loopback runs use ``topologies.cpu_cluster`` with one link per rank to the kernel's
  loopback; its bandwidth and latency are the send/recv fit of the collectives job at that world
  size (``busbw`` and half the one-message ``alpha``: a message crosses two links). Collectives
  with an alpha-beta fit for the group (all_reduce, all_gather, reduce_scatter at the calibrated
  world sizes) use the fit directly. Testbed runs put each rank on a host of its own whose NIC has
  the tc rate less the frames' headers (:data:`TCP_PAYLOAD_SHARE`); there is no added delay (netem
  is absent on this kernel), so the path latency is the same measured software latency.
- **Slow worker**: the slow rank sleeps ``(factor - 1)`` times its compute each step, so its compute
  is ``factor`` times longer: the synchronous strategies' step compute is scaled by it (everyone
  waits), the parameter server gets a straggler on that worker only.
- **Parameter server**: rank 0 of the real run serves, ranks 1.. work; the simulator's
  ``dedicated`` placement with one shard puts the server on the last rank and the workers on the
  others (the same shape, relabelled).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from experiments.validate.grid import MODEL_SIZES, RunSpec
from simcore.compute.core_sharing import shared_core_fixed_point, time_sliced_slowdown
from simcore.compute.heterogeneity import Heterogeneity, Straggler
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.paramserver import Placement, PSConfig, simulate_parameter_server, summarise
from simcore.report_checks import check_records
from simcore.strategies import get_strategy
from simcore.strategies.base import CommCost, TrainingConfig
from simcore.strategies.runner import collective_model, make_context, percentile, simulate_step
from simcore.workload.types import Layer, Workload
from topologies import cpu_cluster

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.compute.optimizer import OptimizerStepCost
    from simcore.paramserver.simulate import PSOutcome
    from simcore.topology import Topology

__all__ = [
    "BenchPoint",
    "LayerCorrectedTimer",
    "LayerCorrections",
    "MeasuredRun",
    "Prediction",
    "blocking_profile",
    "compute_slowdown",
    "layer_corrections",
    "measured_step",
    "measured_topology",
    "nearest_ratio",
    "predict",
    "scaled_compute_profile",
    "training_config",
    "workload_from_description",
]

SYNC_STRATEGIES = ("ddp", "fsdp", "ps-sync")
# gloo's reduce_scatter_tensor moves an all-reduce's bytes: our measurement of the loopback
# interface's byte counters (/proc/net/dev) around one 32 MiB reduce_scatter_tensor, torch 2.13 gloo:
# 2.0 x the buffer on 2 ranks and 6.0 x on 4, exactly all_reduce's 2(n-1)/n x n, where a ring
# reduce-scatter moves (n-1)/n x n (all_gather_into_tensor moved its ring's 1.0 and 3.0). On the
# shaped links of the testbed, where bytes on the wire set the time, it is priced as an all-reduce.
GLOO_REDUCE_SCATTER = "all_reduce"
# Payload share of a tc-shaped link's rate: tbf counts every frame's bytes (qdisc_pkt_len, headers of
# each GSO segment included), and a full 1500-byte-MTU TCP frame on a veth carries 1448 payload bytes
# in 1514: Ethernet header 14 (IEEE 802.3; veth frames have no preamble, FCS or gap), IPv4 20
# (RFC 791), TCP 20 (RFC 9293) + 12 of timestamp option (RFC 7323, Linux tcp_timestamps=1 default).
TCP_PAYLOAD_SHARE = 1448 / 1514
# Workload layer kinds (calibrate.train.models.describe, simcore presets) -> the layer benchmark kinds
# of calibrate.compute.layers that time the same kind of operator, the first one measured counting:
# ReLU and max pooling have benchmarks of their own (max_pool2d_with_indices is no GELU-like
# elementwise kernel), else they take the activation benchmark's correction.
BENCH_KIND: dict[str, tuple[str, ...]] = {
    "conv2d": ("conv",), "conv": ("conv",), "conv1x1": ("conv",), "conv_grouped": ("conv",), "linear": ("linear",),
    "attention": ("attention",), "layernorm": ("norm",), "norm": ("norm",), "embedding": ("embedding",),
    "relu": ("relu", "activation"), "gelu": ("activation",), "maxpool": ("maxpool", "activation"),
    "activation": ("activation",),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BenchPoint:
    """One layer benchmark shape: its forward FLOPs and bytes and its measured / modelled time."""

    flops: float
    bytes: float
    ratio: float


@dataclass(frozen=True, slots=True)
class LayerCorrections:
    """Measured / modelled time of ``calibrate.compute``'s layer benchmarks, per benchmark kind and
    phase: ``medians`` over the kind's rows (the report's table), ``points`` one per benchmarked
    shape. A workload layer takes the ratio of the shape nearest its own (:func:`nearest_ratio`), so
    a kind benchmarked at several shapes (convolutions of 3 and of 64 input channels, 16x16 and 32x32
    images) is corrected by the one that ran kernels like the layer's."""

    medians: Mapping[tuple[str, str], float]
    points: Mapping[tuple[str, str], tuple[BenchPoint, ...]]


def nearest_ratio(points: Sequence[BenchPoint], flops: float, moved: float) -> float:
    """The ratio of the point nearest (``flops``, ``moved``) in log arithmetic intensity and log
    FLOPs: on a roofline, intensity (FLOPs per byte) and size are what tell two layers' kernels
    apart (a 3-channel stem convolution does 13 FLOPs a byte, a 64-channel one 110-145)."""

    def features(f: float, b: float) -> tuple[float, float]:
        return math.log(max(f, 1.0) / max(b, 1.0)), math.log(max(f, 1.0))

    target = features(flops, moved)

    def distance(point: BenchPoint) -> float:
        return sum((x - y) ** 2 for x, y in zip(features(point.flops, point.bytes), target, strict=True))

    return min(points, key=distance).ratio


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """One real run: its configuration, measured step time and the model description it recorded."""

    spec: RunSpec
    step_time_s: float
    steps_timed: int
    description: Mapping[str, Any]
    phases_s: Mapping[str, float]  # medians of the per-step phase times (forward, backward, ...)
    background_threads: float = 0.0  # other processes' busy threads around the run (CPU-share probe)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The simulator's step time for a run (None when it cannot predict it, with the reason)."""

    step_time_s: float | None
    compute_s: float | None
    note: str = ""


def measured_step(records: Sequence[Mapping[str, Any]], spec: RunSpec) -> tuple[float, int, dict[str, float]]:
    """(step time, steps timed, phase medians) of a run's step records, warm-up excluded.

    Synchronous modes (DDP, FSDP, PS sync): a step ends when its slowest rank finishes, so a step's
    time is the largest over the ranks; the run's is the median over steps. Asynchronous modes
    (PS async/SSP): workers step at their own pace, so, as the simulator defines it, a step is one
    gradient per worker: ``W / sum(1 / median_w)``, the workers' combined rate.
    """
    steps = [
        r for r in records if r.get("kind") == "step" and not r.get("warmup") and r.get("role") != "server"
    ]
    if not steps:
        raise TrainsimError(f"{spec.key}: no step records after warm-up; the run failed or was too short")
    phases = {name: statistics.median(float(r.get(name) or 0.0) for r in steps)
              for name in ("forward_s", "backward_s", "optimizer_s", "comm_s", "slow_sleep_s")}  # fmt: skip
    if spec.strategy in SYNC_STRATEGIES:
        by_step: dict[int, float] = {}
        for record in steps:
            by_step[record["step"]] = max(by_step.get(record["step"], 0.0), float(record["step_time_s"]))
        return statistics.median(by_step.values()), len(by_step), phases
    by_rank: dict[int, list[float]] = {}
    for record in steps:
        by_rank.setdefault(int(record["rank"]), []).append(float(record["step_time_s"]))
    rate = math.fsum(1.0 / statistics.median(times) for times in by_rank.values())
    return len(by_rank) / rate, min(len(t) for t in by_rank.values()), phases


def workload_from_description(description: Mapping[str, Any], name: str, tokens_per_sample: int) -> Workload:
    """The simulator's workload for a model as ``calibrate.train.models.describe`` saw it."""
    layers = tuple(
        Layer(
            name=str(row["name"]),
            kind=str(row["kind"]),
            block=int(row["block"]),
            params=int(row["params"]),
            fwd_flops=float(row["fwd_flops"]),
            bwd_flops=float(row["bwd_flops"]),
            activation_bytes=float(row["activation_bytes"]),
            output_bytes=float(row["output_bytes"]),
            memory_bytes=max(0.0, float(row["memory_bytes"]) - 4.0 * int(row["params"])),
        )
        for row in description["layers"]
    )
    blocks = tuple(f"blocks.{i}" for i in range(int(description.get("blocks", 0))))
    return Workload(name, layers, blocks, "fp32", tokens_per_sample, "calibrate.train.models.describe")


def layer_corrections(
    groups: Sequence[tuple[Sequence[Mapping[str, Any]], CalibrationProfile]],
) -> LayerCorrections:
    """Measured / modelled time of each layer benchmark kind and phase (``calibrate.compute``'s
    ``layer`` rows, fp32): how far the roofline misses whole torch layers (dispatch, autograd,
    non-matmul kernels). Each group's rows are modelled with its profile (the matmul rate and copy
    bandwidth measured in the same run as they were, where it has its own). Where a kind has rows
    timed as a training step runs it (``timing: step``: a fresh graph every iteration) they replace
    its rows timed over a retained graph. Medians over a kind's rows, and one median per shape."""
    by_shape: dict[tuple[str, str, str, bool], list[tuple[float, float, float]]] = {}
    for rows, profile in groups:
        model = ComputeModel(device_spec("cpu"), "fp32", profile)
        for row in rows:
            if (
                row.get("kind") != "layer"
                or row.get("dtype") != "fp32"
                or row.get("phase") not in ("fwd", "bwd")
            ):
                continue
            share = (
                1.0 if row["phase"] == "fwd" else 0.5
            )  # backward rows carry twice the forward FLOPs and bytes
            flops, moved = float(row["flops"]) * share, float(row["bytes"]) * share
            layer = Layer(str(row["layer"]), str(row["layer_kind"]), -1, 0, flops, 2 * flops, 0.0, 0.0, moved)
            modelled = model.layer_time_s(layer, 1, str(row["phase"]))
            key = (
                str(row["layer_kind"]),
                str(row["phase"]),
                str(row.get("shape", "")),
                row.get("timing") == "step",
            )
            by_shape.setdefault(key, []).append(
                (flops, moved, float(row["time_us_p50"]) * 1e-6 / modelled)  # forward-sized, both phases
            )
    stepped = {(kind, phase) for kind, phase, _, step in by_shape if step}
    ratios: dict[tuple[str, str], list[float]] = {}
    points: dict[tuple[str, str], list[BenchPoint]] = {}
    for (kind, phase, _, step), measured in sorted(by_shape.items()):
        if step != ((kind, phase) in stepped):
            continue
        ratios.setdefault((kind, phase), []).extend(r for _, _, r in measured)
        flops, moved, _ = measured[0]
        points.setdefault((kind, phase), []).append(
            BenchPoint(flops, moved, statistics.median(r for _, _, r in measured))
        )
    return LayerCorrections(
        {key: statistics.median(values) for key, values in ratios.items()},
        {key: tuple(values) for key, values in points.items()},
    )


class LayerCorrectedTimer:
    """The compute model with each layer's time multiplied by its benchmark correction: the ratio
    of the benchmarked shape of its kind nearest the layer (:class:`LayerCorrections`), or a plain
    per-kind mapping of ratios."""

    def __init__(
        self,
        profile: CalibrationProfile,
        corrections: LayerCorrections | Mapping[tuple[str, str], float],
    ) -> None:
        self.base = ComputeModel(device_spec("cpu"), "fp32", profile)
        self.device = self.base.device
        if isinstance(corrections, LayerCorrections):
            self.corrections: Mapping[tuple[str, str], float] = corrections.medians
            self.points: Mapping[tuple[str, str], tuple[BenchPoint, ...]] = corrections.points
        else:
            self.corrections, self.points = corrections, {}

    def _factor(self, layer: Layer, batch: int, phase: str) -> float:
        phase = "fwd" if phase == "recompute" else phase
        for bench in BENCH_KIND.get(layer.kind, ()):
            points = self.points.get((bench, phase))
            if points:
                # forward FLOPs and bytes, weights included, as the benchmarks count them
                moved = layer.memory_bytes * batch + 4.0 * layer.params
                return nearest_ratio(points, layer.fwd_flops * batch, moved)
            if (bench, phase) in self.corrections:
                return self.corrections[(bench, phase)]
        return 1.0

    def _factors(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        import numpy as np

        return np.array([self._factor(layer, batch, phase) for layer in workload.layers])

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        return self.base.layer_time_s(layer, batch, phase) * self._factor(layer, batch, phase)

    def layer_parts_s(self, workload: Workload, batch: int, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """(kernel, host) seconds per layer, both scaled by the layer's correction (the
        benchmarks time whole layers: arithmetic and dispatch together)."""
        kernel, host = self.base.layer_parts_s(workload, batch, phase)
        factors = self._factors(workload, batch, phase)
        return kernel * factors, host * factors

    def layer_times_s(self, workload: Workload, batch: int, phase: str) -> list[float]:
        kernel, host = self.layer_parts_s(workload, batch, phase)
        return [float(t) for t in self.base.combine(kernel, host)]

    def combine(self, kernel_s: float | np.ndarray, host_s: float | np.ndarray) -> np.ndarray:
        return self.base.combine(kernel_s, host_s)

    def host_op_s(self, phase: str) -> float:
        return self.base.host_op_s(phase)

    def optimizer_time_s(self, params: int, optimizer: str) -> float:
        return self.base.optimizer_time_s(params, optimizer)

    def optimizer_step_time_s(self, cost: OptimizerStepCost, *, host_factor: float = 1.0) -> float:
        return self.base.optimizer_step_time_s(cost, host_factor=host_factor)

    @property
    def memory_bandwidth_Bps(self) -> float:
        """The rank's memory bandwidth (the strategies price their buffer copies with it)."""
        return self.base.memory_bandwidth_Bps

    def gradient_ratio(self, workload: Workload, batch: int) -> float:
        """Corrected / uncorrected forward + backward time of one micro-batch."""
        base = sum(self.base.phase_time_s(workload, batch, p) for p in ("fwd", "bwd"))
        return sum(sum(self.layer_times_s(workload, batch, p)) for p in ("fwd", "bwd")) / base


def scaled_compute_profile(profile: CalibrationProfile, factor: float) -> CalibrationProfile:
    """``profile`` with every calibrated compute time multiplied by ``factor``: matmul rate and
    memory bandwidth divided by it, per-operator overhead multiplied (links untouched)."""
    if factor == 1.0:
        return profile
    curves = {
        dtype: replace(curve, peak_flops=curve.peak_flops / factor)
        for dtype, curve in profile.compute.items()
    }
    bandwidth = None if profile.memory_bandwidth_Bps is None else profile.memory_bandwidth_Bps / factor
    overhead = {phase: seconds * factor for phase, seconds in profile.op_overhead_s.items()}
    return replace(profile, compute=curves, memory_bandwidth_Bps=bandwidth, op_overhead_s=overhead)


def compute_slowdown(ranks_busy: float, cores: int) -> float:
    """How much slower each rank computes when ``ranks_busy`` busy threads share ``cores``."""
    if ranks_busy < 1 or cores < 1:
        raise TrainsimError(f"ranks_busy ({ranks_busy}) and cores ({cores}) must be >= 1")
    return 1.0 / min(1.0, cores / ranks_busy)


def _p2p_link(profile: CalibrationProfile, world: int) -> tuple[float, float]:
    """(bandwidth, per-link latency) of a loopback link from the send/recv fit nearest ``world``."""
    worlds = sorted({ranks for (op, ranks, scope) in profile.collectives if op == "send_recv"})
    if not worlds:
        raise TrainsimError(
            "the calibration profile has no send_recv fit; run calibrate.collectives with send_recv"
        )
    nearest = min(worlds, key=lambda w: (abs(w - world), w))
    fit = profile.collective_alpha_beta("send_recv", nearest, "intra_node")
    assert fit is not None  # nearest was taken from the profile's own keys
    alpha_s, busbw_Bps = fit
    return busbw_Bps, alpha_s / 2.0


def measured_topology(spec: RunSpec, profile: CalibrationProfile, comm_slowdown: float = 1.0) -> Topology:
    """The machine the run measured, as a topology (see the module docstring); the loopback links,
    CPU work, are ``comm_slowdown`` times slower than calibrated (background load)."""
    bandwidth_Bps, latency_s = _p2p_link(profile, spec.world)
    bandwidth_Bps, latency_s = bandwidth_Bps / comm_slowdown, latency_s * comm_slowdown
    if spec.network == "loopback":
        return cpu_cluster(spec.world, loopback_Bps=bandwidth_Bps, loopback_latency_s=latency_s,
                           name=f"loopback-{spec.world}")  # fmt: skip
    assert spec.bandwidth_Bps is not None  # RunSpec guarantees it for testbed runs
    return cpu_cluster(1, hosts=spec.world, loopback_Bps=bandwidth_Bps, loopback_latency_s=latency_s,
                       nic_Bps=spec.bandwidth_Bps * TCP_PAYLOAD_SHARE, nic_latency_s=0.0,
                       name=f"testbed-{spec.world}")  # fmt: skip


def training_config(spec: RunSpec) -> TrainingConfig:
    """The simulator's config of the run: per-worker batch, fp32, SGD with momentum, one step."""
    size = MODEL_SIZES[spec.size]
    return TrainingConfig(
        global_batch=size.batch * spec.workers, micro_batch=size.batch,
        seq_len=size.seq_len if size.model == "transformer" else None, dtype="fp32", optimizer="sgd-momentum",
        master_weights=False, allocator_overhead_bytes=0, steps=1,
        reshard_root_after_forward=True,  # calibrate.train passes reshard_after_forward to the root too
    )  # fmt: skip


def _collective_profile(
    spec: RunSpec, profile: CalibrationProfile, link: CalibrationProfile | None
) -> CalibrationProfile:
    """The fits pricing ``spec``'s collectives: on loopback FSDP's blocking ones as measured after
    compute (:func:`blocking_profile`); on a testbed link those measured on it, where given."""
    if spec.network == "loopback":
        return blocking_profile(profile) if spec.strategy == "fsdp" else profile
    if link is None:
        return profile
    return replace(profile, collectives={**profile.collectives, **link.collectives})


def blocking_profile(profile: CalibrationProfile) -> CalibrationProfile:
    """``profile`` with its collectives-after-compute fits (``calibrate.collectives
    --after-compute-ms``) in place of the back-to-back ones they measured again: FSDP2 on CPU ranks
    blocks the training thread in each all-gather and reduce-scatter between its units' compute,
    which is how that probe issues them. Unchanged when the profile has none."""
    if not profile.after_compute:
        return profile
    return replace(profile, collectives={**profile.collectives, **profile.after_compute})


def predict(run: MeasuredRun, profile: CalibrationProfile, cores: int, *, idle: bool = False,
            corrections: LayerCorrections | Mapping[tuple[str, str], float] | None = None,
            link: CalibrationProfile | None = None) -> Prediction:  # fmt: skip
    """The simulator's step time for ``run``'s configuration on the calibrated machine.

    The ranks share ``cores`` with the run's measured background load, or (``idle``) with nothing.
    ``corrections`` (:func:`layer_corrections`) scale each layer kind's compute time. ``link``: the
    collectives measured on a testbed run's emulated link (``calibrate.collectives`` there), which
    then price DDP's and FSDP's collectives in place of the shaped NIC's ideal rate.
    """
    spec = run.spec
    size = MODEL_SIZES[spec.size]
    workload = workload_from_description(
        run.description, spec.size, size.seq_len if size.model == "transformer" else 0
    )
    background = 0.0 if idle else run.background_threads
    slowdown = compute_slowdown(spec.workers + background, cores)
    comm_slowdown = slowdown / compute_slowdown(spec.workers, cores)
    topology = measured_topology(spec, profile, comm_slowdown)
    timer = LayerCorrectedTimer(profile, corrections or {})
    if spec.is_ps:
        ratio = timer.gradient_ratio(workload, size.batch)
        prediction = _predict_ps(spec, workload, topology, profile, ratio, cores, background)
    else:
        prediction = _predict_collective(
            spec, workload, topology, profile, (slowdown, comm_slowdown), timer, link
        )
    check_records([prediction], f"the prediction of {spec.strategy} on {spec.world} ranks")
    return prediction


def _predict_collective(spec: RunSpec, workload: Workload, topology: Topology, profile: CalibrationProfile,
                        slowdowns: tuple[float, float], timer: LayerCorrectedTimer,
                        link: CalibrationProfile | None = None) -> Prediction:  # fmt: skip
    training = training_config(spec)
    slowdown, comm_slowdown = slowdowns
    cpu_bound = spec.network == "loopback"  # gloo over loopback is CPU work; a tc-shaped NIC is not
    priced = collective_model(topology, _collective_profile(spec, profile, link))
    measured_rs = (
        link is not None and link.collective_fit("reduce_scatter", spec.world, "inter_node") is not None
    )

    def collective(op: str, size_bytes: float, group: tuple[int, ...]) -> CommCost:
        if op == "reduce_scatter" and not cpu_bound and not measured_rs:
            op = GLOO_REDUCE_SCATTER  # the loopback and link fits already measured gloo's own
        cost = priced(op, size_bytes, group)
        scale = comm_slowdown if cpu_bound else 1.0
        return CommCost(cost.time_s * scale, cost.bottleneck_link, cost.link_kind)

    ctx = make_context(workload, training, topology, calibration=profile, timer=timer, collective=collective,
                       device_memory_bytes=timer.base.device.memory_bytes)  # fmt: skip
    scale = slowdown * (spec.slow_factor if spec.slow_rank >= 0 else 1.0)
    result = simulate_step(get_strategy(spec.strategy), ctx, seed=0,
                           slowdown=training.slowdown(profile.comm_compute_slowdown),
                           compute_scale=lambda sim, step: scale)  # fmt: skip
    return Prediction(percentile(result.step_times_s, 50), result.plan.compute_s() * scale)


def _predict_ps(spec: RunSpec, workload: Workload, topology: Topology, profile: CalibrationProfile,
                ratio: float, cores: int, background: float) -> Prediction:  # fmt: skip
    """The parameter server's step: ``ratio`` is the layer corrections' compute ratio.

    Synchronous rounds release every worker at once, so they share the cores for their whole
    compute (:func:`simcore.compute.core_sharing.time_sliced_slowdown`); asynchronous and SSP
    workers drift apart and compute while the others push, pull or wait, so each is slowed by the
    workers (and the server) busy at that moment on average, solved to the fixed point
    (:func:`simcore.compute.core_sharing.shared_core_fixed_point`).
    """

    def run(sharing: Sequence[float]) -> PSOutcome:
        return _simulate_ps(spec, workload, topology, profile, [ratio * s for s in sharing])

    try:
        if spec.strategy == "ps-sync":
            sharing: Sequence[float] = [time_sliced_slowdown(spec.workers + background, cores)] * spec.workers
        else:
            sharing = shared_core_fixed_point(lambda s: _busy_fractions(run(s), spec), spec.workers, cores,
                                              background=background)  # fmt: skip
        result = summarise(run(sharing), cluster=topology.name)
    except (TrainsimError, ValueError, KeyError, TypeError) as error:
        return Prediction(None, None, f"not predicted: the parameter-server simulation failed ({error})")
    return Prediction(result.step.step_time_s, result.step.compute_s)


def _simulate_ps(spec: RunSpec, workload: Workload, topology: Topology, profile: CalibrationProfile,
                 slowdowns: Sequence[float]) -> PSOutcome:  # fmt: skip
    """One parameter-server simulation with worker ``w`` computing ``slowdowns[w]`` times slower
    (the slow worker also ``spec.slow_factor`` times)."""
    slow_worker = spec.slow_rank - 1  # real rank 0 serves; real worker r is simulated worker r - 1
    # A straggler factor must be >= 1; a net speed-up (layer corrections below 1 on a nearly idle
    # machine) is applied by scaling the profile's compute instead.
    faster = min(1.0, *slowdowns)
    profile = scaled_compute_profile(profile, faster)
    stragglers = tuple(Straggler(w, slowdowns[w] / faster * (spec.slow_factor if w == slow_worker else 1.0))
                       for w in range(spec.workers))  # fmt: skip
    # calibrate.train's workers push the whole gradient after backward and wait for the pull
    ps = PSConfig(mode=spec.strategy, shards=1, placement=Placement("dedicated", 1),
                  staleness_bound=spec.staleness_bound, steps=max(8, spec.steps), layerwise=False)  # fmt: skip
    return simulate_parameter_server(workload, training_config(spec), topology, ps, workers=spec.workers,
                                     heterogeneity=Heterogeneity(stragglers=stragglers),
                                     calibration=profile, seed=0)  # fmt: skip


def _busy_fractions(outcome: PSOutcome, spec: RunSpec) -> list[float]:
    """Fraction of the run each worker computes (its sleep as the slow worker excluded), then the
    server's (its updates)."""
    slow_worker = spec.slow_rank - 1
    elapsed = outcome.elapsed_s
    fractions = []
    for w in range(spec.workers):
        sleep = spec.slow_factor if w == slow_worker else 1.0
        fractions.append(outcome.compute_s[w] / sleep * outcome.records.gradients[w] / elapsed)
    return [*fractions, *(busy / elapsed for busy in outcome.shard_busy_s)]
