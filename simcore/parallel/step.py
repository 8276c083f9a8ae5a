"""The composed training step of a DP x TP x PP x CP x EP layout, one representative rank per stage.

For each distinct pipeline rank (ranks holding the same layers are priced once) a
:class:`~simcore.parallel.stage.StageModel` gives its sharded layers and their times with the
exposed tensor-, context- and expert-parallel communication. The data-parallel strategy
(``ddp``, ``zero1``/``zero2``/``zero3``, ``fsdp``, ``hsdp`` from :mod:`simcore.strategies`) then
plans and runs that stage's step exactly as it does for pure data parallelism, over the stage's
data x context-parallel group, with collectives priced while the sibling groups on the same hosts
run theirs (:class:`~simcore.parallel.comm.GroupPricer`):

- without pipelining that run *is* the step (gradient accumulation included);
- with pipelining the stage runs one micro-batch: its forward and backward durations give the
  per-micro-batch pass times (pure compute for DDP and ZeRO-1, which communicate only after the
  last micro-batch; the measured passes for ZeRO-2/3, FSDP and HSDP, which gather or reduce every
  micro-batch, except an FSDP stage that gathers and reduces once per step, whose passes are pure
  compute and whose stretch is added once to its tail, :func:`_gathers_once`), what follows its
  last backward (gradient reduction not hidden, optimizer step) is
  the stage's tail, and its memory timeline the state and one micro-batch. The pipeline schedule
  (:func:`simcore.parallel.pp.run_pipeline`) places every pass; the step ends when the last stage
  to finish its backward has run its tail. A stage's peak adds the micro-batches its schedule keeps
  in flight beyond the one the run held.

A layout of all ones with no recompute (or full recompute) and no offload is today's data-parallel
step, run by the same code path as the what-if always ran (:func:`simcore.strategies.runner.simulate_step`).

The stages' steps run on the engine path ``path`` picks (:mod:`simcore.fastpath.path`: the
event-free evaluator where every rank is alike, the same result as the discrete-event run to
rounding). What configurations of a sweep share (stage models, stage runs, collective prices,
pipeline orders) lives in a :class:`~simcore.parallel.cache.ComposeCache` the caller owns.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simcore.compute.fp8 import compute_model, tp_gathers_in_fp8, weight_cast_microbatches
from simcore.compute.heterogeneity import is_mixed_devices
from simcore.compute.memory import TIGHT_HEADROOM
from simcore.compute.rank_spread import spread_ranks
from simcore.compute.saved_tensors import saved_tensor_workload
from simcore.errors import TrainsimError
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.fastpath.path import DEFAULT_ENGINE_PATH, check_engine_path, choose_path
from simcore.fastpath.run import evaluate_step
from simcore.parallel.cache import ComposeCache
from simcore.parallel.comm import GroupPricer, sharing_groups
from simcore.parallel.layout import ParallelLayout, Placement, check_layout
from simcore.parallel.memory_pipeline import (
    pipelined_extra_bytes,
    run_state_bytes,
    stage_held_state,
    stage_runtime_held,
    state_category,
)
from simcore.parallel.offload import OffloadEffect, offload_effect
from simcore.parallel.options import ParallelOptions
from simcore.parallel.pp import (
    CompiledOrders,
    PipelineOp,
    PipelineRun,
    StageTimes,
    compile_orders,
    partition_stages,
    rank_orders,
    run_pipeline,
)
from simcore.parallel.report import ParallelStepReport
from simcore.parallel.stage import (
    ShardedStage,
    StageModel,
    build_stage,
    exposed_comm,
    shard_spec,
    shard_stage,
)
from simcore.report import StepReport
from simcore.step.plan import PlanRun, Span
from simcore.strategies import get_strategy
from simcore.strategies.base import CommCost, StepContext, TrainingConfig, model_flops_per_step
from simcore.strategies.runner import (
    StepResult,
    gating_device,
    make_context,
    nics_on_host,
    report_step,
    simulate_step,
)

if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.topology import Topology
    from simcore.workload.types import Layer, Workload

__all__ = [
    "ParallelStepResult",
    "StagePrediction",
    "compose_parallel_step",
    "simulate_parallel_step",
    "step_time_lower_bound",
]


@dataclass(slots=True)
class StagePrediction:
    """One pipeline rank's share of a parallel step."""

    rank: int
    blocks: int
    peak_memory_bytes: float
    memory_breakdown: dict[str, float]
    peak_phase: str
    in_flight_microbatches: float
    tail_s: float
    comm_s: dict[str, float]
    host_memory_bytes: float = 0.0


@dataclass(slots=True)
class ParallelStepResult:
    """A parallel layout's step: its report, the first stage's run, stages and the pipeline run."""

    report: ParallelStepReport
    # the first stage's data-parallel run (without pipelining: the step itself); None when the
    # caller asked for the report only (``trace=False``) and the step was evaluated without one
    run: StepResult | None
    stages: list[StagePrediction] = field(default_factory=list)
    pipeline: PipelineRun | None = None
    traced: bool = True  # False: evaluated for the report only (no spans to draw)

    @property
    def step(self) -> StepResult:
        """A step result for traces: the pipeline's passes, one lane per stage (built when asked
        for: a planner reading only reports never pays for it), or the run without pipelining."""
        if self.run is None or not self.traced:
            raise TrainsimError("this step was evaluated for its report only (trace=False): no trace to show")
        if self.pipeline is None:
            return self.run
        return _trace_step(self.run, self.pipeline, self.report.step_time_s)


def _mfu(workload: Workload, config: TrainingConfig, gpus: int, peak_flops: float, step_s: float) -> float:
    return model_flops_per_step(workload, config.global_batch) / (gpus * peak_flops * step_s)


def _delegates(layout: ParallelLayout, options: ParallelOptions) -> bool:
    return layout.is_trivial and options.recompute in ("none", "full") and options.offload == "none"


def _gating(cache: ComposeCache, topology: Topology, dtype: str) -> DeviceSpec:
    return cache.get("device", (cache.identity(topology), dtype), lambda: gating_device(topology, dtype))


def _engine_path(cache: ComposeCache, path: str, topology: Topology) -> str:
    return cache.get("path", (cache.identity(topology), path), lambda: choose_path(path, topology))


def simulate_parallel_step(
    workload: Workload,
    config: TrainingConfig,
    topology: Topology,
    strategy: str,
    layout: ParallelLayout,
    options: ParallelOptions = ParallelOptions(),  # noqa: B008 - frozen, shared safely
    *,
    calibration: CalibrationProfile | None = None,
    cluster: str = "",
    seed: int = 0,
    path: str = DEFAULT_ENGINE_PATH,
    cache: ComposeCache | None = None,
    trace: bool = True,
) -> ParallelStepResult:
    """One training step of ``workload`` under ``layout`` with ``strategy`` on the data-parallel axis.

    ``path`` (:mod:`simcore.fastpath.path`): ``auto`` runs the data-parallel steps on the
    event-free evaluator where the topology's ranks are alike, ``fast``/``des`` force one.
    ``cache``: what configurations of a sweep share (:class:`~simcore.parallel.cache.ComposeCache`);
    None keeps a private one for this call. ``trace=False``: only the report is wanted, so on the
    fast path a step without pipelining nor offload is evaluated by
    :func:`~simcore.fastpath.step.fast_step_report` (long gradient accumulation extrapolated from a
    probe, deep models folded: the same report to rounding, many times faster; the transient of
    blocks rematerialised at once charged on its peak, where that is during the passes), a pipeline
    is timed without its passes' spans, and the result has no ``step`` to trace.
    """
    gpus = topology.world_size
    check_engine_path(path)
    check_layout(layout, gpus, workload, cp_kind=options.cp_kind)
    workload = saved_tensor_workload(workload, options.saved_tensors, config.fp8)
    if not _delegates(layout, options):
        return compose_parallel_step(
            workload, config, topology, strategy, layout, options, calibration=calibration,
            cluster=cluster, seed=seed, path=path, cache=cache, trace=trace,
        )  # fmt: skip
    chosen = get_strategy(strategy)
    cache = cache if cache is not None else ComposeCache()
    device = _gating(cache, topology, config.dtype)
    peak_flops = device.flops(config.dtype)
    slowdown = config.slowdown(calibration.comm_compute_slowdown if calibration else None)
    engine = _engine_path(cache, path, topology)
    fast = engine == "fast"
    cfg = replace(
        config, activation_checkpointing=config.activation_checkpointing or options.recompute == "full"
    )
    ctx = make_context(
        workload, cfg, topology, calibration=calibration,
        collective=fast_collective_model(topology, calibration) if fast else None,
        concurrent=fast_concurrent_model(topology, calibration) if fast else None,
    )  # fmt: skip
    name = cluster or topology.name
    evaluated = evaluate_step(
        chosen, ctx, path=engine, slowdown=slowdown, cluster=name, device=device.name, peak_flops=peak_flops,
        seed=seed, trace=trace,
    )  # fmt: skip
    base, step = evaluated.report, evaluated.step
    report = _wrap(
        base, layout, options, gpus, cfg.accumulation_steps(gpus), 0.0, (base.peak_memory_bytes,), {}, 0.0,
        0.0, (),
    )  # fmt: skip
    stage = StagePrediction(
        0, len(workload.block_names), base.peak_memory_bytes, dict(base.memory_breakdown), base.peak_phase,
        1.0, 0.0, {},
    )  # fmt: skip
    return ParallelStepResult(
        replace(report, mfu=_mfu(workload, config, gpus, peak_flops, report.step_time_s)), step, [stage],
        traced=trace,
    )  # fmt: skip


def compose_parallel_step(
    workload: Workload,
    config: TrainingConfig,
    topology: Topology,
    strategy: str,
    layout: ParallelLayout,
    options: ParallelOptions = ParallelOptions(),  # noqa: B008 - frozen, shared safely
    *,
    calibration: CalibrationProfile | None = None,
    cluster: str = "",
    seed: int = 0,
    path: str = DEFAULT_ENGINE_PATH,
    cache: ComposeCache | None = None,
    trace: bool = True,
) -> ParallelStepResult:
    """The composed step (stages, data-parallel runs, pipeline) for any valid layout.

    :func:`simulate_parallel_step` hands pure data parallelism to the what-if's own step instead;
    for that layout the two agree exactly (a property test keeps them so). ``path``, ``cache`` and
    ``trace`` as there.
    """
    check_engine_path(path)
    check_layout(layout, topology.world_size, workload, cp_kind=options.cp_kind)
    cache = cache if cache is not None else ComposeCache()
    device = _gating(cache, topology, config.dtype)
    slowdown = config.slowdown(calibration.comm_compute_slowdown if calibration else None)
    inputs = _Inputs(
        workload, config, topology, get_strategy(strategy).name, layout, options, calibration, seed, slowdown,
        _engine_path(cache, path, topology), device, trace,
    )  # fmt: skip
    return _Composer(inputs, cache).run(cluster or topology.name, device.name, device.flops(config.dtype))


def step_time_lower_bound(
    workload: Workload,
    config: TrainingConfig,
    topology: Topology,
    strategy: str,
    layout: ParallelLayout,
    options: ParallelOptions = ParallelOptions(),  # noqa: B008 - frozen, shared safely
    *,
    calibration: CalibrationProfile | None = None,
    path: str = DEFAULT_ENGINE_PATH,
    cache: ComposeCache | None = None,
) -> float:
    """Seconds the step of :func:`simulate_parallel_step` (same arguments) cannot go below; 0.0
    where no bound is known (pure data parallelism, which that function hands to the what-if's step).

    Each pipeline rank runs every pass of every micro-batch on one device, one after another, so
    the step lasts at least a rank's passes; rank ``r`` starts only once the first micro-batch's
    forward has come through the first chunk of ranks ``0 .. r-1``, and (but for ZB-H1, whose
    weight gradients may come last) its last pass is a backward of its first chunk, after which
    ranks ``r-1 .. 0`` run that micro-batch's backward of theirs in turn. A pass lasts at least
    its layers' times as :func:`~simcore.parallel.stage.build_stage` gives them (the sharded
    compute and the exposed tensor/context/expert communication; the comm-under-compute slowdown,
    offload transfers and the pipeline's waits only add), read off one layer of each kind (blocks
    alike share them) without running a step. Full recompute adds a forward to each backward; a
    selective rerun, the data-parallel communication and the tail (gradient reduction, optimizer
    step) count nothing. The planner skips a layout whose bound is above the layouts it lists.
    """
    gpus = topology.world_size
    check_layout(layout, gpus, workload, cp_kind=options.cp_kind)
    workload = saved_tensor_workload(workload, options.saved_tensors, config.fp8)
    if _delegates(layout, options) or workload.dims is None:
        return 0.0
    cache = cache if cache is not None else ComposeCache()
    device = _gating(cache, topology, config.dtype)
    inputs = _Inputs(
        workload, config, topology, get_strategy(strategy).name, layout, options, calibration, 0,
        None, _engine_path(cache, path, topology), device, False,
    )  # fmt: skip
    return _Composer(inputs, cache).lower_bound_s()


_Kind = tuple[object, ...]  # a layer's kind for the lower bound (_layer_kind)


def _kernel_seconds(timer: object, sharded: ShardedStage, micro_batch: int, phase: str) -> np.ndarray:
    """The device seconds of a stage's layers in ``phase``: a span of layers takes the longer of
    its kernels' and its host dispatch's sums (:meth:`~simcore.compute.roofline.ComputeModel.combine`),
    so at least its kernels', and one layer the longer of its own two."""
    parts = getattr(timer, "layer_parts_s", None)
    if parts is None:  # a timer without the split: its layer times
        return sharded.base[phase]
    kernel, _ = parts(sharded.workload, micro_batch, phase)
    return kernel


def _layer_kind(layer: Layer) -> _Kind:
    """What makes two layers' compute alike: a block's layers by kind, size and role, the rest by name."""
    if layer.block >= 0:
        return ("block", layer.kind, layer.params, layer.name.rsplit(".", 1)[-1])
    return ("layer", layer.name)


def _wrap(
    base: StepReport,
    layout: ParallelLayout,
    options: ParallelOptions,
    gpus: int,
    microbatches: int,
    bubble: float,
    stage_peaks: tuple[float, ...],
    comm: dict[str, float],
    p2p_s: float,
    host_bytes: float,
    notes: tuple[str, ...],
) -> ParallelStepReport:
    fields = {name: getattr(base, name) for name in StepReport.__dataclass_fields__}
    return ParallelStepReport(
        **fields,
        layout=layout.label(gpus),
        dp=layout.dp(gpus),
        tp=layout.tp,
        pp=layout.pp,
        cp=layout.cp,
        ep=layout.ep,
        vpp=layout.vpp,
        schedule=options.schedule,
        sequence_parallel=options.sequence_parallel and layout.tp > 1,
        recompute=options.recompute,
        offload=options.offload,
        microbatches=microbatches,
        pipeline_bubble_fraction=bubble,
        stage_peak_memory_bytes=stage_peaks,
        tp_comm_s=comm.get("tp", 0.0),
        cp_comm_s=comm.get("cp", 0.0),
        ep_comm_s=comm.get("ep", 0.0),
        p2p_comm_s=p2p_s,
        host_memory_bytes=host_bytes,
        placement_notes=notes,
    )


@dataclass(slots=True)
class _StageRun:
    """A stage's data-parallel step run and what the pipeline needs of it."""

    model: StageModel
    ctx: StepContext
    result: StepResult | None  # None: evaluated for its report only (``report``)
    times: list[StageTimes]
    tail_s: float
    offload: OffloadEffect
    last_backward_s: float  # end of the run's last backward (what follows is the tail)
    key: tuple[object, ...]  # its key in the compose cache
    report: StepReport | None = None  # the stage's own report, when it was evaluated for that only

    @property
    def step_time_s(self) -> float:
        return self.result.run.step_time_s if self.result is not None else _own(self).step_time_s


def _own(run: _StageRun) -> StepReport:
    if run.report is None:
        raise TrainsimError("a stage evaluated without its report")  # never: one of the two is set
    return run.report


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Everything one composed step depends on (the engine path already chosen)."""

    workload: Workload
    config: TrainingConfig
    topology: Topology
    strategy: str
    layout: ParallelLayout
    options: ParallelOptions
    calibration: CalibrationProfile | None
    seed: int
    slowdown: float | None
    path: str
    device: DeviceSpec
    trace: bool = True


def _sibling_collective(
    cache: ComposeCache, pricer: GroupPricer, tp: int
) -> Callable[[str, float, tuple[int, ...]], CommCost]:
    """A stage's data-parallel collectives, priced while the ``tp - 1`` groups beside it (the
    other tensor-parallel coordinates of the same stage, on the same hosts) run theirs."""
    topology = pricer.topology
    where = (cache.identity(topology), tp)

    def collective(op: str, size_bytes: float, group: tuple[int, ...]) -> CommCost:
        def siblings() -> list[tuple[int, ...]]:
            shifted = [tuple(r + t for r in group) for t in range(1, tp)]
            return sharing_groups(topology, group, shifted)

        return pricer.price(op, size_bytes, group, cache.get("siblings", (*where, group), siblings))

    return collective


class _Composer:
    """Builds and runs every distinct stage, then the pipeline (see the module docstring).

    Stage models and stage runs come from the compose cache: a stage's sharded layers and compute
    times by what :func:`~simcore.parallel.stage.shard_stage` reads (workload, compute model,
    rank, chunks, pipeline degree, shard spec, recompute mode, micro-batch), its model by
    everything :func:`~simcore.parallel.stage.build_stage` reads besides (topology, calibration,
    layout and GPU count: the placement its communication is priced on; options), a stage run
    by that and what its step reads (strategy, the stage's own training configuration, seed,
    slowdown, engine path). With pipelining a stage runs one micro-batch whatever the global
    batch, so batch sizes of a sweep share their stage runs.
    """

    def __init__(self, inputs: _Inputs, cache: ComposeCache) -> None:
        config, options, layout, topology = inputs.config, inputs.options, inputs.layout, inputs.topology
        if config.activation_checkpointing and options.recompute == "none":
            options = replace(options, recompute="full")  # --checkpoint-activations is full recompute
        self.workload, self.config, self.topology = inputs.workload, config, topology
        self.strategy, self.layout, self.options = inputs.strategy, layout, options
        self.seed, self.slowdown, self.path = inputs.seed, inputs.slowdown, inputs.path
        # For the report only, a stage without pipelining or offload may be evaluated without a
        # trace (fast_step_report); its peak is then its run's (no extra activations, see _stage_peak).
        self.trace = inputs.trace
        self.lean = not inputs.trace and self.path == "fast" and layout.pp == 1 and options.offload == "none"
        self.labels: tuple[str, str, float] = ("", "", 0.0)  # cluster, device, peak FLOP/s of the report
        self.gpus = topology.world_size
        self.dp = layout.dp(self.gpus)
        per_step = self.dp * config.micro_batch
        if config.global_batch % per_step:
            raise TrainsimError(
                f"global batch {config.global_batch} is not divisible by dp x micro-batch = {self.dp} x "
                f"{config.micro_batch} = {per_step}; choose a global batch that is a multiple of {per_step}"
            )
        self.micro = config.global_batch // per_step
        self.cache = cache
        topology_id, calibration_id = cache.identity(topology), cache.identity(inputs.calibration)
        self.placement = cache.get("placement", (layout, self.gpus), lambda: Placement(layout, self.gpus))
        self.pricer = cache.get(
            "pricer",
            (topology_id, calibration_id, self.path),
            lambda: GroupPricer(
                topology, inputs.calibration, "closed_form" if self.path == "fast" else "flow"
            ),
        )
        self.device = inputs.device
        self._spread_ranks = spread_ranks(
            config.rank_spread,
            self.gpus,
            explicit_speeds=config.compute_jitter_sigma > 0
            or cache.get("mixed devices", (topology_id,), lambda: is_mixed_devices(topology)),
        )
        self.timer = cache.get(
            "timer",
            (
                cache.identity(self.device),
                config.dtype,
                config.fp8,
                calibration_id,
                config.compile,
                config.software_era,
                weight_cast_microbatches(config.fp8, self.micro),
                config.power_limit_w,
                self._spread_ranks,
            ),
            lambda: compute_model(
                self.device,
                config.dtype,
                inputs.calibration,
                config.fp8,
                compiled=config.compile,
                software_era=config.software_era,
                microbatches=self.micro,
                power_limit_w=config.power_limit_w,
                ranks=self._spread_ranks,
            ),
        )
        self.mode, _ = options.recompute_mode
        self._collective = _sibling_collective(cache, self.pricer, layout.tp)
        # What every stage model and stage run of this step depends on besides its rank and chunks.
        # The schedule is not among them: it orders the passes of the pipeline (and with zb-h1 splits
        # each backward's weight-gradient share off, computed apart from the run: _stage_times), so
        # the stages of 1f1b, gpipe and zb-h1 layouts are built and run once.
        self._where = (
            cache.identity(self.workload), topology_id, calibration_id, config.dtype, layout, self.gpus,
            replace(options, schedule="1f1b"), config.micro_batch,
        )  # fmt: skip

    # -- stages --------------------------------------------------------------------------------------
    def _chunks(self) -> list[tuple[list[tuple[int, ...]], tuple[object, ...]]]:
        """Each pipeline rank's chunks (layer indices) and what makes two ranks' work alike."""
        lay = self.layout
        key = (self.cache.identity(self.workload), lay.pp, lay.vpp, lay.stage_layers)

        def cut() -> list[tuple[list[tuple[int, ...]], tuple[object, ...]]]:
            virtual = partition_stages(self.workload, lay.pp * lay.vpp, lay.stage_layers)
            ranks = [[virtual[c * lay.pp + r] for c in range(lay.vpp)] for r in range(lay.pp)]
            return [(chunks, self._signature(chunks)) for chunks in ranks]

        return self.cache.get("chunks", key, cut)

    def _signature(self, chunks: list[tuple[int, ...]]) -> tuple[object, ...]:
        layers = self.workload.layers
        return tuple(
            tuple((layers[i].kind, layers[i].params, layers[i].name.rsplit(".", 1)[-1]) for i in c)
            for c in chunks
        )

    def _stage_config(self, accumulation: int) -> TrainingConfig:
        """The training configuration of one stage's data-parallel step over its dp x cp group."""
        n = self.dp * self.layout.cp
        return replace(
            self.config,
            global_batch=n * self.config.micro_batch * accumulation,
            activation_checkpointing=self.mode == "full",
            steps=1,
            compute_jitter_sigma=0.0,
        )

    def _context(self, model: StageModel, cfg: TrainingConfig) -> StepContext:
        stage = model.rank
        world = self.placement.dp_cp_group(stage)
        host = self.topology.host_of_rank(world[0])
        node = tuple(r for r in world if self.topology.host_of_rank(r) == host)
        first_on_host: dict[int, int] = {}
        for r in world:
            first_on_host.setdefault(self.topology.host_of_rank(r), r)
        return StepContext(
            model.workload,
            cfg,
            len(world),
            model.timer,
            self._collective,
            world,
            node,
            tuple(first_on_host.values()),
            self.device.memory_bytes,
            nics_per_node=nics_on_host(self.topology, host),
        )

    def _stage_run(self, rank: int, chunks: list[tuple[int, ...]]) -> _StageRun:
        """Pipeline rank ``rank``'s stage model and run, from the cache or built."""
        where = (*self._where, rank, tuple(chunks))

        def build() -> StageModel:
            return build_stage(
                self.workload, rank, chunks, layout=self.layout, options=self.options,
                placement=self.placement, pricer=self.pricer, timer=self.timer,
                micro_batch=self.config.micro_batch, sharded=self._sharded(rank, chunks),
            )  # fmt: skip

        cfg = self._stage_config(1 if self.layout.pp > 1 else self.micro)
        key = (*where, self.strategy, cfg, self.seed, self.slowdown, self.path)
        if self.lean:
            return self.cache.get(
                "lean stage run",
                (*key, *self.labels),
                lambda: self._lean_run(self.cache.get("stage", where, build), cfg, key),
            )
        run = self.cache.get(
            "stage run", key, lambda: self._run_stage(self.cache.get("stage", where, build), cfg, key)
        )
        return self._stage_times(run)

    def _lean_run(self, model: StageModel, cfg: TrainingConfig, key: tuple[object, ...]) -> _StageRun:
        """The stage's report without a trace, where nothing but its run's peak is read of it.

        Blocks rematerialised at once (selective, every-K recompute) add their transient to the
        passes' peak (:func:`_stage_peak`): taken on the event-free report's peak where that peak is
        provably during the passes (:func:`_with_transient`), else the traced run is evaluated."""
        ctx = self._context(model, cfg)
        cluster, device, peak_flops = self.labels
        report = evaluate_step(
            get_strategy(self.strategy), ctx, path="fast", slowdown=self.slowdown, cluster=cluster,
            device=device, peak_flops=peak_flops,
        ).report  # fmt: skip
        if model.transient_per_sample:
            fragmentation = cfg.fragmentation(ctx.device_kind)
            held = _with_transient(
                report, model.transient_per_sample * self.config.micro_batch, fragmentation
            )
            if held is None:
                return self._run_stage(model, cfg, key)
            report = held
        return _StageRun(model, ctx, None, [], 0.0, OffloadEffect(), report.step_time_s, key, report)

    def _sharded(self, rank: int, chunks: list[tuple[int, ...]]) -> ShardedStage:
        """The stage's sharded layers and compute times: shared by every topology, data-parallel
        degree, schedule and strategy with the same split (what :func:`shard_stage` reads)."""
        dims = self.workload.dims
        assert dims is not None  # check_layout rejects model parallelism without a transformer shape
        key = (
            self.cache.identity(self.workload), self.cache.identity(self.timer), rank, tuple(chunks),
            self.layout.pp, shard_spec(self.layout, self.options, dims), self.options.recompute,
            self.config.micro_batch,
        )  # fmt: skip
        return self.cache.get(
            "sharded stage",
            key,
            lambda: shard_stage(
                self.workload,
                rank,
                chunks,
                layout=self.layout,
                options=self.options,
                timer=self.timer,
                micro_batch=self.config.micro_batch,
            ),
        )

    def _run_stage(self, model: StageModel, cfg: TrainingConfig, key: tuple[object, ...]) -> _StageRun:
        pipelined = self.layout.pp > 1
        ctx = self._context(model, cfg)
        result = simulate_step(
            get_strategy(self.strategy), ctx, seed=self.seed, slowdown=self.slowdown, path=self.path
        )
        mb = self.config.micro_batch
        pure = [
            (
                model.chunk_time_s(c, "fwd", mb),
                model.chunk_time_s(c, "bwd", mb)
                + (model.chunk_time_s(c, "recompute", mb) if self.mode == "full" else 0.0),
            )
            for c in range(len(model.chunks))
        ]
        fwd_span, bwd_span, last_bwd = _pass_spans(result.run)
        scale_f = scale_b = 1.0
        once = 0.0  # the passes' stretch paid once per step, not per micro-batch
        strategy = get_strategy(self.strategy)
        if strategy.communicates_every_microbatch and pipelined:
            total_f, total_b = sum(p[0] for p in pure), sum(p[1] for p in pure)
            if _gathers_once(strategy.framework, cfg):
                once = max(0.0, fwd_span - total_f) + max(0.0, bwd_span - total_b)
            else:
                scale_f = max(1.0, fwd_span / total_f) if total_f else 1.0
                scale_b = max(1.0, bwd_span / total_b) if total_b else 1.0
        effect = self._offload(model, ctx, result, sum(p[0] for p in pure), sum(p[1] for p in pure))
        times = []
        for c, (f, b) in enumerate(pure):
            share_f = f / sum(p[0] for p in pure) if f else 0.0
            share_b = b / sum(p[1] for p in pure) if b else 0.0
            times.append(
                StageTimes(
                    f * scale_f + effect.per_micro_fwd_s * share_f,
                    b * scale_b + effect.per_micro_bwd_s * share_b,
                    self._w_share(model, c),
                )
            )
        tail = (result.run.step_time_s - last_bwd if pipelined else 0.0) + effect.tail_s + once
        return _StageRun(model, ctx, result, times, max(0.0, tail), effect, last_bwd, key)

    def _stage_times(self, run: _StageRun) -> _StageRun:
        """``run`` with each chunk's weight-gradient share set for this step's schedule (zb-h1 splits it
        off each backward; every other schedule keeps it inside), the one part of a stage's run the
        schedule changes."""
        shares = [self._w_share(run.model, c) for c in range(len(run.times))]
        if all(t.w == w for t, w in zip(run.times, shares, strict=True)):
            return run
        return replace(run, times=[replace(t, w=w) for t, w in zip(run.times, shares, strict=True)])

    def _w_share(self, model: StageModel, chunk: int) -> float:
        """Weight-gradient seconds of a chunk's backward (the half of each linear layer's backward)."""
        if self.options.schedule != "zb-h1":
            return 0.0
        base = self.timer.layer_times_s(model.workload, self.config.micro_batch, "bwd")
        return float(
            sum(base[i] / 2.0 for i in model.chunk_slices[chunk] if model.workload.layers[i].kind == "linear")
        )

    def _offload(
        self, model: StageModel, ctx: StepContext, result: StepResult, fwd_s: float, bwd_s: float
    ) -> OffloadEffect:
        if self.options.offload == "none":
            return OffloadEffect()
        breakdown = dict(result.run.memory.peak().breakdown)
        initial = result.plan.initial_memory
        opt_per_param = self.config.optimizer_bytes or 1
        local = float(initial.get("optimizer", 0.0)) / opt_per_param
        mb = self.config.micro_batch
        layers = model.workload.layers
        return offload_effect(
            self.options.offload,
            topology=self.topology,
            rank=self.placement.rank(pp=model.rank),
            breakdown=breakdown,
            optimizer=self.config.optimizer,
            optimizer_params=local,
            gpu_optimizer_s=ctx.optimizer_step(get_strategy(self.strategy), local, 1).seconds,
            param_bytes=model.workload.params * self.config.param_bytes,
            micro_fwd_s=fwd_s,
            micro_bwd_s=bwd_s,
            activations_per_micro=sum(model.held_per_sample) * mb,
            largest_layer_params=max((layer.params for layer in layers), default=0),
            largest_layer_activations=max((layer.activation_bytes for layer in layers), default=0.0) * mb,
            param_bytes_per_param=self.config.param_bytes,
        )

    # -- a lower bound on the step ---------------------------------------------------------------------
    def _representatives(self) -> tuple[tuple[_Kind, ...], list[int], ShardedStage]:
        """Each model layer's kind (:func:`_layer_kind`), the first layer of each kind, and those
        layers sharded as one stage (their compute times are those of every layer of their kind)."""
        dims = self.workload.dims
        assert dims is not None  # step_time_lower_bound returns before without a transformer shape
        kinds = self.cache.get(
            "layer kinds",
            (self.cache.identity(self.workload),),
            lambda: tuple(_layer_kind(layer) for layer in self.workload.layers),
        )
        key = (
            self.cache.identity(self.workload), self.cache.identity(self.timer),
            shard_spec(self.layout, self.options, dims), self.options.recompute, self.config.micro_batch,
        )  # fmt: skip

        def shard() -> tuple[tuple[_Kind, ...], list[int], ShardedStage]:
            first: dict[_Kind, int] = {}
            for i, kind in enumerate(kinds):
                first.setdefault(kind, i)
            order = sorted(first.values())
            one = replace(self.layout, pp=1, vpp=1, stage_layers=None)
            sharded = shard_stage(
                self.workload, 0, [tuple(order)], layout=one, options=self.options, timer=self.timer,
                micro_batch=self.config.micro_batch,
            )  # fmt: skip
            return kinds, order, sharded

        return self.cache.get("layer kind stage", key, shard)

    def _kind_seconds(self, rank: int) -> dict[_Kind, tuple[float, float]]:
        """Per layer kind, the forward and the backward seconds of one micro-batch on pipeline rank
        ``rank``: the sharded layer's compute and its exposed tensor/context/expert communication,
        as :func:`~simcore.parallel.stage.build_stage` prices them (a full recompute's forward in
        the backward; a selective rerun left out)."""
        kinds, order, sharded = self._representatives()
        dims = self.workload.dims
        assert dims is not None
        key = (*self._where, rank, self.cache.identity(sharded))

        def measure() -> dict[_Kind, tuple[float, float]]:
            base = sharded.base
            # priced exactly as build_stage prices them (FP8 linears' gathers included): a bound
            # that priced bf16 gathers for an FP8 run could rise above the step it bounds
            fwd_comm, bwd_comm, _, _ = exposed_comm(
                [self.workload.layers[g] for g in order], dims, sharded.spec, self.options, self.placement,
                self.pricer, rank, self.config.micro_batch, self.workload.dtype_bytes, base,
                self.timer.memory_bandwidth_Bps, fp8_tp_gathers=tp_gathers_in_fp8(self.timer),
                device_name=self.timer.device.name,
            )  # fmt: skip
            mb = self.config.micro_batch
            kernel = {phase: _kernel_seconds(self.timer, sharded, mb, phase) for phase in base}
            fwd = kernel["fwd"] + fwd_comm
            bwd = kernel["bwd"] + bwd_comm + (kernel["recompute"] + fwd_comm if self.mode == "full" else 0.0)
            return {kinds[g]: (float(fwd[i]), float(bwd[i])) for i, g in enumerate(order)}

        return self.cache.get("layer kind seconds", key, measure)

    def _kind_counts(self) -> list[list[tuple[tuple[_Kind, int], ...]]]:
        """Per pipeline rank and chunk, how many layers of each kind it holds (a tied copy's head,
        resized on the last stage, left out)."""
        kinds, _, _ = self._representatives()
        lay = self.layout

        def count() -> list[list[tuple[tuple[_Kind, int], ...]]]:
            layers = self.workload.layers
            skip = {i for i, layer in enumerate(layers) if layer.name == "lm_head" and self.workload.ties}
            out = []
            for rank_chunks, _ in self._chunks():
                per_chunk = []
                for chunk in rank_chunks:
                    held: dict[_Kind, int] = {}
                    for i in chunk:
                        if i not in skip:
                            held[kinds[i]] = held.get(kinds[i], 0) + 1
                    per_chunk.append(tuple(held.items()))
                out.append(per_chunk)
            return out

        key = (self.cache.identity(self.workload), lay.pp, lay.vpp, lay.stage_layers)
        return self.cache.get("layer kind counts", key, count)

    def lower_bound_s(self) -> float:
        """The step's lower bound (see :func:`step_time_lower_bound`)."""
        # Without a split-off weight gradient a rank's last pass is a backward of its first chunk,
        # which every rank before it then runs in turn: the drain.
        drains = self.options.schedule != "zb-h1"
        bound = fill = drain = 0.0
        for rank, chunks in enumerate(self._kind_counts()):
            seconds = self._kind_seconds(rank)
            per_chunk = [
                (math.fsum(n * seconds[k][0] for k, n in held), math.fsum(n * seconds[k][1] for k, n in held))
                for held in chunks
            ]
            passes = math.fsum(f + b for f, b in per_chunk)
            bound = max(bound, fill + self.micro * passes + (drain if drains else 0.0))
            fill += per_chunk[0][0]
            drain += per_chunk[0][1]
        return bound

    # -- the step ------------------------------------------------------------------------------------
    def run(self, cluster: str, device: str, peak_flops: float) -> ParallelStepResult:
        self.labels = (cluster, device, peak_flops)
        chunks = self._chunks()
        runs: dict[tuple[object, ...], _StageRun] = {}
        per_rank: list[_StageRun] = []
        for rank, (rank_chunks, signature) in enumerate(chunks):
            key = (signature, rank == 0, rank == len(chunks) - 1)
            if key not in runs:
                runs[key] = self._stage_run(rank, rank_chunks)
            per_rank.append(runs[key])
        pipeline, p2p_s = self._pipeline(per_rank) if self.layout.pp > 1 else (None, 0.0)
        step_s = self._step_time(per_rank, pipeline)
        stages = self._stage_predictions(per_rank, pipeline)
        return self._result(per_rank, stages, pipeline, step_s, p2p_s, cluster, device, peak_flops)

    def _p2p_bytes(self) -> float:
        dims = self.workload.dims
        assert dims is not None
        return (
            self.config.micro_batch
            * dims.seq_len
            / self.layout.cp
            * dims.hidden
            * self.workload.dtype_bytes
            / self.layout.tp
        )

    def _pipeline(self, per_rank: list[_StageRun]) -> tuple[PipelineRun, float]:
        lay = self.layout
        size = self._p2p_bytes()
        stage_size = self.gpus // lay.pp

        def p2p(src: int, dst: int) -> float:
            def price() -> float:
                a, b = self.placement.rank(pp=src), self.placement.rank(pp=dst)
                pairs = [(a + o, b + o) for o in range(1, stage_size)]
                return self.pricer.price(
                    "send_recv", size, (a, b), sharing_groups(self.topology, (a, b), pairs)
                ).time_s

            # every pair of ranks of one stage sends at once: the price depends on the placement
            return self.cache.get("p2p", (*self._where[1:3], lay, self.gpus, size, src, dst), price)

        shape = self._schedule_shape()
        orders: list[list[PipelineOp]] | CompiledOrders = self._orders()
        weights = [
            [run.model.held_per_sample[c] * self.config.micro_batch for c in range(lay.vpp)]
            for run in per_rank
        ]
        times = [run.times for run in per_rank]
        split_w = self.options.schedule == "zb-h1"

        def timed() -> PipelineRun:
            return run_pipeline(
                orders,
                times,
                p2p,
                split_w=split_w,
                activation_weights=weights,
                spans=self.trace,
                blocking_sends=self.options.p2p_blocking,
            )

        if self.trace or not isinstance(orders, CompiledOrders):
            pipeline = timed()
        else:
            # Without spans the run is a function of the shape, the stage times, the activation
            # weights and the send times alone: one run serves every strategy whose stages time
            # alike on this split (DDP and ZeRO-1 communicate after the last micro-batch) and a
            # layout timed again (the planner's sweeps, the benchmark).
            send_times = tuple(p2p(src, dst) for src, dst in orders.links)
            blocking = self.options.p2p_blocking
            key = (shape, split_w, blocking, tuple(map(tuple, times)), tuple(map(tuple, weights)), send_times)
            pipeline = self.cache.get("pipeline run", key, timed)
        sends = 2 * self.micro * lay.vpp  # a forward and a backward send per micro-batch and chunk
        return pipeline, sends * p2p(0, 1 % lay.pp)

    def _schedule_shape(self) -> tuple[str, int, int, int]:
        """What the pipeline's pass orders depend on: schedule, stages, virtual stages, micro-batches."""
        return (self.options.schedule, self.layout.pp, self.layout.vpp, self.micro)

    def _orders(self) -> CompiledOrders:
        shape = self._schedule_shape()
        return self.cache.get("orders", shape, lambda: compile_orders(rank_orders(*shape), self.layout.vpp))

    def _pipelined_extra(
        self, run: _StageRun, order: list[PipelineOp]
    ) -> tuple[float, dict[str, float], tuple[float, float]]:
        """Activations and (by category) held state the rank keeps at its pipelined peak beyond its
        run's, and (what the pipeline runtime still holds once the passes end, through the
        optimizer step; what it makes for a moment as they end) (:mod:`simcore.parallel.memory_pipeline`)."""
        mb = self.config.micro_batch
        activations = [held * mb for held in run.model.held_per_sample]
        strategy = get_strategy(self.strategy)
        held = stage_held_state(run.model, run.ctx, strategy)
        run_state = 0.0
        if run.result is not None:
            run_state = run_state_bytes(
                run.result.run.memory, run.result.plan.initial_memory, run.last_backward_s,
                strategy.zero_stage, strategy.framework,
            )  # fmt: skip
        # FSDP2 composes with pipelining only through torch.distributed.pipelining (torchtitan):
        # its stages' buffers and kept outputs (memory_pipeline.RuntimeHeld); Megatron's schedule
        # keeps only the in-flight micro-batches' tensors (and frees their outputs' data once sent)
        runtime = (
            stage_runtime_held(run.model, self.layout.pp, self.layout.vpp, mb)
            if strategy.framework == "torch-fsdp"
            else None
        )
        more, state = pipelined_extra_bytes(
            order, activations, held, run_activations=sum(activations), run_state=run_state, runtime=runtime
        )
        after = (runtime.after_step(self.micro), runtime.merge_bytes(self.micro)) if runtime else (0.0, 0.0)
        return more, {state_category(strategy.zero_stage, strategy.framework): state}, after

    def _step_time(self, per_rank: list[_StageRun], pipeline: PipelineRun | None) -> float:
        if pipeline is None:
            run = per_rank[0]
            extra = self.micro * (run.offload.per_micro_fwd_s + run.offload.per_micro_bwd_s)
            return run.step_time_s + extra + run.tail_s
        tied = self._tied_embedding_sync_s()
        ends = [
            pipeline.last_backward_end_s[r] + run.tail_s + (tied if r in (0, len(per_rank) - 1) else 0.0)
            for r, run in enumerate(per_rank)
        ]
        return max(ends)

    def _tied_embedding_sync_s(self) -> float:
        """Megatron all-reduces the gradients of the two copies of a tied word embedding between
        the first and the last stage after the pipeline flush."""
        dims = self.workload.dims
        if not self.workload.ties or dims is None:
            return 0.0
        group = (self.placement.rank(pp=0), self.placement.rank(pp=self.layout.pp - 1))
        size = dims.vocab * dims.hidden / self.layout.tp * self.config.grad_bytes
        return self.pricer.price("all_reduce", size, group).time_s

    def _stage_predictions(
        self, per_rank: list[_StageRun], pipeline: PipelineRun | None
    ) -> list[StagePrediction]:
        out = []
        mb = self.config.micro_batch
        orders = self._orders().orders if pipeline is not None else None
        for r, run in enumerate(per_rank):
            held_one = sum(run.model.held_per_sample) * mb
            in_flight = pipeline.peak_in_flight[r] if pipeline is not None else held_one
            extra = max(0.0, in_flight - held_one) + run.model.transient_per_sample * mb
            held: dict[str, float] = {}
            after_passes = (0.0, 0.0)
            if orders is not None:  # with the state the schedule keeps across micro-batches
                # a function of the cached stage run, the schedule's shape and this rank's order
                # alone: a layout timed again (a sweep, the benchmark) walks its passes once
                key = (run.key, self._schedule_shape(), r, mb, self.strategy)
                more, held, after_passes = self.cache.get(
                    "pipelined extra", key, functools.partial(self._pipelined_extra, run, orders[r])
                )
                extra = more + run.model.transient_per_sample * mb
            peak, breakdown, phase = _stage_peak(run, extra, held, *after_passes)
            out.append(
                StagePrediction(
                    r,
                    len(run.model.workload.block_names),
                    peak,
                    breakdown,
                    phase,
                    in_flight / held_one if held_one else 1.0,
                    run.tail_s,
                    dict(run.model.comm_s),
                    run.offload.host_bytes,
                )
            )
        return out

    def _result(
        self,
        per_rank: list[_StageRun],
        stages: list[StagePrediction],
        pipeline: PipelineRun | None,
        step_s: float,
        p2p_s: float,
        cluster: str,
        device: str,
        peak_flops: float,
    ) -> ParallelStepResult:
        worst = max(stages, key=lambda s: (s.peak_memory_bytes, -s.rank))
        first = per_rank[0]
        result = first.result
        base = (
            _own(first)
            if result is None
            else self.cache.get(
                "stage report",
                (*first.key, cluster, device, peak_flops),
                lambda: report_step(result, first.ctx, cluster=cluster, device=device, peak_flops=peak_flops),
            )
        )
        comm = {
            axis: max(run.model.comm_s.get(axis, 0.0) for run in per_rank) * self.micro
            for axis in ("tp", "cp", "ep")
        }
        # the layer times carry their exposed tensor/context/expert collectives (they block the
        # compute stream): those seconds are communication on the critical path, not compute
        busy = max(pipeline.busy_s) if pipeline is not None else base.compute_s
        compute_s = max(0.0, busy - sum(comm.values()))
        capacity = float(self.device.memory_bytes)
        fits = all(s.peak_memory_bytes <= capacity for s in stages)
        verdict = (
            f"fits: peak {worst.peak_memory_bytes / 1e9:.1f} GB of {capacity / 1e9:.1f} GB (stage {worst.rank})"
            if fits
            else f"OOM: stage {worst.rank} peaks at {worst.peak_memory_bytes / 1e9:.1f} GB, "
            f"{(worst.peak_memory_bytes - capacity) / 1e9:.1f} GB over {capacity / 1e9:.1f} GB during {worst.peak_phase}"
        )
        samples_per_s = self.config.global_batch / step_s
        tokens = self.workload.tokens_per_sample
        merged = replace(
            base,
            model=self.workload.name,
            gpus=self.gpus,
            global_batch=self.config.global_batch,
            accumulation_steps=self.micro,
            step_time_s=step_s,
            step_time_p99_s=step_s,
            samples_per_s=samples_per_s,
            tokens_per_s=samples_per_s * tokens if tokens else None,
            mfu=_mfu(self.workload, self.config, self.gpus, peak_flops, step_s),
            compute_s=compute_s,
            exposed_comm_s=max(0.0, step_s - compute_s),
            comm_s=base.comm_s + sum(comm.values()) + p2p_s,
            comm_bytes=base.comm_bytes + max(run.model.comm_bytes for run in per_rank) * self.micro,
            peak_memory_bytes=worst.peak_memory_bytes,
            peak_phase=f"stage {worst.rank}: {worst.peak_phase}",
            memory_breakdown=worst.memory_breakdown,
            memory_capacity_bytes=capacity,
            fits=fits,
            oom_verdict=verdict,
            memory_status=_memory_status(worst.peak_memory_bytes, capacity),
        )
        notes = tuple(self.placement.notes(self.topology))
        report = _wrap(
            merged,
            self.layout,
            self.options,
            self.gpus,
            self.micro,
            pipeline.bubble_fraction if pipeline is not None else 0.0,
            tuple(s.peak_memory_bytes for s in stages),
            comm,
            p2p_s,
            max(s.host_memory_bytes for s in stages),
            notes,
        )
        if self.workload.dims is not None:
            spec = shard_spec(self.layout, self.options, self.workload.dims)
            report = replace(report, sequence_parallel=spec.sequence_parallel)
        return ParallelStepResult(report, first.result, stages, pipeline, traced=self.trace)


def _memory_status(peak_bytes: float, capacity_bytes: float) -> str:
    """The worst stage's memory status, as :meth:`simcore.compute.memory.MemoryPeak.status` words it."""
    if peak_bytes > capacity_bytes:
        return "OOM"
    if capacity_bytes - peak_bytes < TIGHT_HEADROOM * capacity_bytes:
        return "fits with < 10% headroom"
    return "fits"


def _stage_peak(
    run: _StageRun,
    extra: float,
    held: Mapping[str, float] | None = None,
    after_passes: float = 0.0,
    as_passes_end: float = 0.0,
) -> tuple[float, dict[str, float], str]:
    """A stage's peak: the run's timeline, with ``extra`` activations (micro-batches in flight beyond
    the run's one, blocks being recomputed) and ``held`` state by category (what the pipeline keeps
    across micro-batches) while the passes run, ``after_passes`` activations the pipeline runtime
    keeps after them (through the optimizer step) with ``as_passes_end`` more made for a moment as
    they end (beside the run's total then), and the offload's changes."""
    held = held or {}
    if run.result is None:  # a lean run: nothing beyond its own peak (Composer.lean)
        own = _own(run)
        return own.peak_memory_bytes, dict(own.memory_breakdown), own.peak_phase
    timeline = run.result.run.memory
    peak = timeline.peak()
    cut = run.last_backward_s * (1 + 1e-12)
    passes = max((total for t, total, _ in timeline.samples if t <= cut), default=0.0)
    after = max((total for t, total, _ in timeline.samples if t > cut), default=0.0)
    end = next((total for t, total, _ in reversed(timeline.samples) if t <= cut), 0.0)
    delta = run.offload.memory_delta
    held_all_step = math.fsum(v for k, v in delta.items() if k != "activations") + after_passes
    during = passes + extra + math.fsum(held.values()) + math.fsum(delta.values())
    # The allocator's fragmentation is charged on the tensors at the peak (MemoryTimeline.peak);
    # the stage's extra activations and offload changes are tensors too.
    raw_peak = max((total for _, total, _ in timeline.samples), default=0.0)
    overhead = peak.breakdown.get("overhead", 0.0) - (peak.peak_bytes - raw_peak)
    merging = as_passes_end > 0 and end + as_passes_end > after
    if merging:  # made as the passes end, beside what the run holds then
        after = end + as_passes_end
    tensors = max(during, after + held_all_step)
    total = tensors + timeline.fragmentation * max(0.0, tensors - overhead)
    breakdown = dict(peak.breakdown)
    for category, change in delta.items():
        breakdown[category] = max(0.0, breakdown.get(category, 0.0) + change)
    if during >= after + held_all_step:  # the passes hold the peak: the held state is in it
        for category, amount in held.items():
            breakdown[category] = breakdown.get(category, 0.0) + amount
            breakdown["overhead"] = breakdown.get("overhead", 0.0) + amount * timeline.fragmentation
    missing = total - math.fsum(breakdown.values())
    if abs(missing) > 1e-9 * max(total, 1.0):  # activations in flight or moved by offload
        breakdown["activations"] = max(0.0, breakdown.get("activations", 0.0) + missing)
    phase = peak.phase
    if extra > 0 and during >= total:
        phase = f"{phase}, with {extra / 2**30:.1f} GiB more activations in flight"
    elif merging and during < after + held_all_step:
        phase = "end of the pipeline's passes (the last stage merges its micro-batches' outputs)"
    return total, breakdown, phase


# Saved activations at a peak, as a share of it, above which the peak is during the passes: after
# the last backward every saved activation is freed (each backward frees what its forward saved),
# so what is left there is the rounding of those sums (bytes, on totals of 1e10 bytes and more).
_DURING_PASSES = 1e-6


def _with_transient(report: StepReport, transient: float, fragmentation: float) -> StepReport | None:
    """``report`` (a stage run without pipelining, nor offload) with ``transient`` bytes held at
    the peak of its passes, as :func:`_stage_peak` charges them on the run's timeline; None when
    its peak may be after the last backward (no saved activations at it), where the passes' own
    peak is not in the report.

    Why it is the same number: with the peak during the passes, the timeline's largest total
    before the last backward ends is the peak's tensors ``R`` and the largest after it is at most
    ``R``, so the stage holds ``R + transient``; the report's peak is ``R`` plus the allocator's
    fragmentation on ``R``'s tensors (:func:`simcore.compute.memory.allocator_peak`), from which
    ``R`` and the fixed overhead are recovered."""
    breakdown = dict(report.memory_breakdown)
    peak = report.peak_memory_bytes
    if breakdown.get("activations", 0.0) <= _DURING_PASSES * peak:
        return None
    on_tensors = math.fsum(v for c, v in breakdown.items() if c != "overhead")
    raw_peak = peak - fragmentation * on_tensors
    overhead = breakdown.get("overhead", 0.0) - (peak - raw_peak)
    tensors = raw_peak + transient
    total = tensors + fragmentation * max(0.0, tensors - overhead)
    missing = total - math.fsum(breakdown.values())
    if abs(missing) > 1e-9 * max(total, 1.0):
        breakdown["activations"] = max(0.0, breakdown.get("activations", 0.0) + missing)
    phase = report.peak_phase
    if transient > 0 and tensors >= total:
        phase = f"{phase}, with {transient / 2**30:.1f} GiB more activations in flight"
    return replace(report, peak_memory_bytes=total, memory_breakdown=breakdown, peak_phase=phase)


def _gathers_once(framework: str, config: TrainingConfig) -> bool:
    """Whether an FSDP stage under pipelining gathers its parameters and reduces its gradients once
    per step rather than every micro-batch: with ``reshard_after_forward`` off and the gradient sync
    on the last micro-batch only, as torch.distributed.pipelining runs an FSDP2 stage
    (``torch/distributed/pipelining/stage.py``: every backward but the last calls
    ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)``). The one
    micro-batch the stage run simulates then holds the step's whole all-gather (first forward) and
    reduce-scatter (last backward): their exposed time and slowdown belong to the step once, not to
    every micro-batch's passes."""
    return (
        framework == "torch-fsdp"
        and not config.reshard_after_forward
        and not config.gradient_sync_every_micro_batch
    )


def _pass_spans(run: PlanRun) -> tuple[float, float, float]:
    """(forward duration, backward duration, end of the last backward) of one run's compute."""
    fwd = [s for s in run.spans if s.stream == "compute" and s.kind == "fwd"]
    bwd = [s for s in run.spans if s.stream == "compute" and s.kind in ("bwd", "recompute")]
    if not fwd or not bwd:
        return 0.0, 0.0, run.step_time_s
    f = max(s.end_s for s in fwd) - min(s.start_s for s in fwd)
    end = max(s.end_s for s in bwd)
    return f, end - min(s.start_s for s in bwd), end


def _trace_step(first: StepResult, pipeline: PipelineRun, step_s: float) -> StepResult:
    """A step result whose spans are the pipeline's passes, one lane per stage (Chrome trace)."""
    names = {"F": "forward", "B": "backward", "W": "weight gradients"}
    spans = [
        Span(
            f"stage{rank}/compute",
            f"{names[op.kind]} mb{op.micro}" + (f" chunk{op.chunk}" if op.chunk else ""),
            op.kind,
            start,
            end,
        )
        for rank, op, start, end in sorted(pipeline.spans, key=lambda s: (s[2], s[3], s[0]))
    ]
    run = PlanRun(step_s, spans, first.run.memory)
    return StepResult(first.plan, run, [step_s])
