"""One pipeline rank's share of the model: its sharded layers, their times with the exposed
tensor-, context- and expert-parallel communication, and what it keeps per micro-batch.

A :class:`StageModel` is built for the representative rank (tensor, context and data coordinate
0) of each pipeline rank; every other rank of that stage does the same work. Its ``workload`` is
a :class:`~simcore.workload.types.Workload` of the rank's layers (all its chunks, in chunk order,
blocks renumbered) as one rank computes them (:func:`simcore.parallel.shard.shard_layer`), so the
data-parallel strategies of :mod:`simcore.strategies` plan on it unchanged; its ``timer`` adds each
layer's exposed communication to the compute model's layer times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simcore.compute.fp8 import is_fp8_linear, tp_gathers_in_fp8
from simcore.compute.optimizer import OptimizerStepCost
from simcore.compute.roofline import PHASES
from simcore.parallel.comm import GroupPricer, sharing_groups
from simcore.parallel.cp import context_parallel_exposed_s, ring_kernel_extra_s
from simcore.parallel.ep import expert_parallel_exposed_s
from simcore.parallel.layout import ParallelLayout, Placement
from simcore.parallel.options import ParallelOptions
from simcore.parallel.recompute import apply_recompute, held_bytes
from simcore.parallel.shard import ShardSpec, shard_layer
from simcore.parallel.tp import hide_fraction, overlapped_exposed_s, tensor_parallel_collectives
from simcore.workload.types import Layer, ParameterTie, TransformerDims, Workload

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

    from simcore.compute.roofline import ComputeModel

__all__ = [
    "ShardedStage",
    "StageModel",
    "StageTimer",
    "build_stage",
    "exposed_comm",
    "shard_spec",
    "shard_stage",
]

Group = tuple[int, ...]


class StageTimer:
    """A compute model's per-layer times plus fixed extra seconds per layer and phase.

    The extras belong to the layers of the stage's ``workload``; a workload of some of them (a
    shallower copy of the model, as :mod:`simcore.fastpath.fold` times) gets theirs by layer name.
    """

    def __init__(
        self, base: ComputeModel, extra: dict[str, np.ndarray], workload: Workload | None = None
    ) -> None:
        self.base = base
        self.extra = extra
        self.device = base.device
        self.memory_bandwidth_Bps = base.memory_bandwidth_Bps
        self._workload = workload
        self._index = {layer.name: i for i, layer in enumerate(workload.layers)} if workload else {}

    def _extra(self, workload: Workload, phase: str) -> np.ndarray:
        extra = self.extra[phase]
        if workload is self._workload or self._workload is None:
            return extra
        import numpy as np

        return np.asarray([extra[self._index[layer.name]] for layer in workload.layers])

    def layer_times_s(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        return self.base.layer_times_s(workload, batch, phase) + self._extra(workload, phase)

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        return self.base.layer_time_s(layer, batch, phase)

    def optimizer_time_s(self, params: int, optimizer: str) -> float:
        return self.base.optimizer_time_s(params, optimizer)

    def optimizer_step_time_s(self, cost: OptimizerStepCost, host_factor: float = 1.0) -> float:
        return float(self.base.optimizer_step_time_s(cost, host_factor=host_factor))

    # The host/device split the strategies price spans with (simcore.strategies.base.StepContext):
    # the stage's extra seconds (its tensor/context/expert communication) are device time.
    @property
    def curve(self) -> object:
        return self.base.curve

    def layer_parts_s(self, workload: Workload, batch: int, phase: str) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        kernel, host = self.base.layer_parts_s(workload, batch, phase)
        return np.asarray(kernel) + self._extra(workload, phase), np.asarray(host)

    def combine(self, kernel_s: float, host_s: float) -> float:
        return float(self.base.combine(kernel_s, host_s))

    def host_op_s(self, phase: str) -> float:
        return float(self.base.host_op_s(phase))


@dataclass(slots=True)
class StageModel:
    """What one pipeline rank runs (see the module docstring); per-chunk figures in chunk order."""

    rank: int
    chunks: tuple[tuple[int, ...], ...]  # layer indices of the whole model, per chunk
    workload: Workload
    chunk_slices: tuple[range, ...]  # indices into ``workload.layers`` per chunk
    timer: StageTimer
    held_per_sample: tuple[float, ...]  # bytes kept from forward to backward per sample, per chunk
    transient_per_sample: float  # rematerialised at once during recompute (selective, every-K)
    comm_s: dict[str, float]  # exposed seconds per micro-batch by axis (tp, cp, ep)
    tied_copy_params: int = 0  # a tied embedding duplicated on this (last) stage
    comm_bytes: float = 0.0  # bytes of the tensor/context/expert collectives per micro-batch

    def chunk_time_s(self, chunk: int, phase: str, batch: int) -> float:
        times = self.timer.layer_times_s(self.workload, batch, phase)
        return float(times[list(self.chunk_slices[chunk])].sum())


def shard_spec(layout: ParallelLayout, options: ParallelOptions, dims: TransformerDims) -> ShardSpec:
    """The split of a layer; sequence parallelism forced on for experts x tensor parallelism."""
    forced = dims.moe is not None and layout.ep > 1 and layout.tp > 1
    return ShardSpec(
        tp=layout.tp,
        cp=layout.cp,
        ep=layout.ep,
        sequence_parallel=(options.sequence_parallel or forced) and layout.tp > 1,
        expert_load=options.effective_expert_load,
        saved_input=options.tp_saved_input,
    )


def _stage_workload(
    workload: Workload, order: Sequence[int], layers: Sequence[Layer], rank: int, tp: int, tied_copy: int
) -> Workload:
    """The rank's sharded ``layers`` (model layers ``order``) as a workload: blocks renumbered in
    order, a tie kept when all its layers are local (its table split over ``tp``)."""
    renumber: dict[int, int] = {}
    names: list[str] = []
    out = []
    for g, layer in zip(order, layers, strict=True):
        if layer.block >= 0:
            if layer.block not in renumber:
                renumber[layer.block] = len(renumber)
                names.append(workload.block_names[workload.layers[g].block])
            layer = replace(layer, block=renumber[layer.block])
        out.append(layer)
    if tied_copy:
        head = next(i for i, layer in enumerate(out) if layer.name == "lm_head")
        out[head] = replace(out[head], params=tied_copy)
    position = {g: i for i, g in enumerate(order)}
    ties = tuple(
        ParameterTie(round(tie.params / tp), tuple(position[i] for i in tie.layers))
        for tie in workload.ties
        if all(i in position for i in tie.layers)
    )
    return Workload(
        name=workload.name
        if rank == 0 and len(order) == len(workload.layers)
        else f"{workload.name} [stage {rank}]",
        layers=tuple(out),
        block_names=tuple(names),
        dtype=workload.dtype,
        tokens_per_sample=workload.tokens_per_sample,
        source=workload.source,
        ties=ties,
        dims=workload.dims,
        vocab_parallel=tp,
    )


@dataclass(frozen=True, slots=True)
class ShardedStage:
    """The part of a :class:`StageModel` that does not depend on where the ranks are: the rank's
    sharded layers after recompute and their compute times (shared by every topology and
    data-parallel degree with the same split; see :func:`shard_stage`)."""

    rank: int
    chunks: tuple[tuple[int, ...], ...]
    spec: ShardSpec
    workload: Workload  # the rank's layers as one rank computes them
    rerun: tuple[tuple[int, ...], ...]  # forwards rerun before each layer's backward (recompute)
    transient_per_sample: float
    base: dict[str, np.ndarray]  # compute seconds per layer and phase, one micro-batch
    chunk_slices: tuple[range, ...]
    held_per_sample: tuple[float, ...]
    tied_copy_params: int
    rerun_shares: tuple[tuple[tuple[float, float], ...], ...]  # (compute, collective) share of each rerun


def shard_stage(
    workload: Workload,
    rank: int,
    chunks: Sequence[tuple[int, ...]],
    *,
    layout: ParallelLayout,
    options: ParallelOptions,
    timer: ComputeModel,
    micro_batch: int,
) -> ShardedStage:
    """Pipeline rank ``rank``'s sharded layers and compute times (what :func:`build_stage` prices
    the communication of). Reads of ``layout`` only its tensor, context, expert and pipeline
    degrees, of ``options`` the shard spec's fields and the recompute mode."""
    import numpy as np

    dims = workload.dims
    assert dims is not None  # check_layout rejects model parallelism without a transformer shape
    spec = shard_spec(layout, options, dims)
    order = [i for chunk in chunks for i in chunk]
    sharded = [shard_layer(workload.layers[i], dims, spec, workload.dtype_bytes) for i in order]
    mode, every = options.recompute_mode
    plan = apply_recompute(
        sharded, [workload.layers[i].block for i in order], mode, every,
        dims=dims, sequence_parallel=spec.sequence_parallel, elem=workload.dtype_bytes,
        # an FP8 recipe's compute model, its linears seen by the policy as _scaled_mm
        fp8_linears=getattr(timer, "recipe", None) is not None and options.fp8_checkpoint_op == "scaled_mm",
    )  # fmt: skip
    tied_copy = 0
    if (
        workload.ties
        and layout.pp > 1
        and 0 not in order
        and any(workload.layers[i].name == "lm_head" for i in order)
    ):
        tied_copy = round(dims.vocab * dims.hidden / layout.tp)  # Megatron's copy of the word embedding
    stage_wl = _stage_workload(workload, order, plan.layers, rank, layout.tp, tied_copy)
    base = {phase: np.asarray(timer.layer_times_s(stage_wl, micro_batch, phase)) for phase in PHASES}
    slices, start = [], 0
    for chunk in chunks:
        slices.append(range(start, start + len(chunk)))
        start += len(chunk)
    held = tuple(held_bytes([stage_wl.layers[i] for i in s], mode == "full") for s in slices)
    return ShardedStage(
        rank, tuple(tuple(c) for c in chunks), spec, stage_wl, tuple(tuple(r) for r in plan.rerun),
        plan.transient_bytes, base, tuple(slices), held, tied_copy,
        tuple(plan.rerun_shares(i) for i in range(len(plan.rerun))),
    )  # fmt: skip


def build_stage(
    workload: Workload,
    rank: int,
    chunks: Sequence[tuple[int, ...]],
    *,
    layout: ParallelLayout,
    options: ParallelOptions,
    placement: Placement,
    pricer: GroupPricer,
    timer: ComputeModel,
    micro_batch: int,
    sharded: ShardedStage | None = None,
) -> StageModel:
    """The :class:`StageModel` of pipeline rank ``rank`` holding ``chunks`` (``sharded``: its
    :func:`shard_stage`, when the caller has it already)."""
    import numpy as np

    dims = workload.dims
    assert dims is not None  # check_layout rejects model parallelism without a transformer shape
    if sharded is None:
        sharded = shard_stage(
            workload, rank, chunks, layout=layout, options=options, timer=timer, micro_batch=micro_batch
        )
    base = sharded.base
    fwd_comm, bwd_comm, by_axis, comm_bytes = exposed_comm(
        [workload.layers[i] for chunk in chunks for i in chunk],
        dims,
        sharded.spec,
        options,
        placement,
        pricer,
        rank,
        micro_batch,
        workload.dtype_bytes,
        base,
        timer.memory_bandwidth_Bps,
        fp8_tp_gathers=tp_gathers_in_fp8(timer),
        device_name=timer.device.name,
    )
    bwd_rerun = np.array([
        sum(c * base["fwd"][j] + m * fwd_comm[j] for j, (c, m) in zip(rerun, shares, strict=True))
        for rerun, shares in zip(sharded.rerun, sharded.rerun_shares, strict=True)
    ])  # fmt: skip
    extra = {"fwd": fwd_comm, "bwd": bwd_comm + bwd_rerun, "recompute": fwd_comm}
    return StageModel(
        rank,
        sharded.chunks,
        sharded.workload,
        sharded.chunk_slices,
        StageTimer(timer, extra, sharded.workload),
        sharded.held_per_sample,
        sharded.transient_per_sample,
        by_axis,
        sharded.tied_copy_params,
        comm_bytes,
    )


def exposed_comm(
    layers: Sequence[Layer],
    dims: TransformerDims,
    spec: ShardSpec,
    options: ParallelOptions,
    placement: Placement,
    pricer: GroupPricer,
    rank: int,
    micro_batch: int,
    elem: int,
    base: dict[str, np.ndarray],
    memory_bandwidth_Bps: float,
    *,
    fp8_tp_gathers: bool = False,
    device_name: str = "",
) -> tuple[np.ndarray, np.ndarray, dict[str, float], float]:
    """Exposed forward and backward seconds per layer, their per-axis totals, and the bytes of
    every collective priced (the report's ``comm_bytes`` counts them beside data parallelism's;
    ``fp8_tp_gathers``: the FP8 linears' sequence-parallel all-gathers move one byte per element).
    The per-layer seconds also carry ring attention's kernel-rate correction on ``device_name``
    (:func:`~simcore.parallel.cp.ring_kernel_extra_s`, no communication: not in the totals)."""
    import numpy as np

    fwd = np.zeros(len(layers))
    bwd = np.zeros(len(layers))
    totals = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    moved = [0.0]

    def counted(axis_price: Callable[[str, float], float]) -> Callable[[str, float], float]:
        def price_of(op: str, size_bytes: float) -> float:
            moved[0] += size_bytes
            return axis_price(op, size_bytes)

        return price_of

    price = {axis: counted(_axis_price(placement, pricer, axis, rank)) for axis in ("tp", "cp", "ep")}
    hide = hide_fraction() if options.tp_comm_overlap else 0.0
    for i, layer in enumerate(layers):
        gather_elem = 1.0 if fp8_tp_gathers and is_fp8_linear(layer) else None
        for coll in tensor_parallel_collectives(
            layer, dims, spec, micro_batch, elem, overlap=options.tp_comm_overlap, gather_elem=gather_elem
        ):
            gemm_s = coll.gemm_share * float(base[coll.phase][i])
            seconds = overlapped_exposed_s(
                price["tp"](coll.op, coll.size_bytes), gemm_s, coll.overlap, spec.tp, hide
            )
            (fwd if coll.phase == "fwd" else bwd)[i] += seconds
            totals["tp"] += seconds
        f, b = context_parallel_exposed_s(
            layer,
            dims,
            spec,
            micro_batch=micro_batch,
            elem=elem,
            kind=options.cp_kind,
            attention_s=(float(base["fwd"][i]), float(base["bwd"][i])),
            price=price["cp"],
            memory_bandwidth_Bps=memory_bandwidth_Bps,
            merge=options.ring_merge,
            kv=options.ring_kv,
        )
        kf, kb = ring_kernel_extra_s(
            layer,
            spec,
            kind=options.cp_kind,
            attention_s=(float(base["fwd"][i]), float(base["bwd"][i])),
            device_name=device_name,
        )
        fwd[i] += kf
        bwd[i] += kb
        g, h = expert_parallel_exposed_s(
            layer, dims, spec, micro_batch=micro_batch, elem=elem, price=price["ep"]
        )
        fwd[i] += f + g
        bwd[i] += b + h
        totals["cp"] += f + b
        totals["ep"] += g + h
    return fwd, bwd, totals, moved[0]


def _axis_price(
    placement: Placement, pricer: GroupPricer, axis: str, rank: int
) -> Callable[[str, float], float]:
    groups = placement.axis_groups(axis, rank) if getattr(placement.layout, axis) > 1 else [()]
    group = groups[0]
    siblings = sharing_groups(pricer.topology, group, groups[1:])

    def price(op: str, size_bytes: float) -> float:
        return pricer.price(op, size_bytes, group, siblings).time_s

    return price
