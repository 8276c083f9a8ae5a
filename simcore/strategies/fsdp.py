"""FSDP and ZeRO-3: parameters, gradients and optimizer state sharded; units gathered on use.

Per micro-batch, for every unit (see :mod:`simcore.strategies.wrap`):

- forward: all-gather the unit's parameters (the whole unit's bytes in the compute dtype) before
  its first layer runs; while a unit computes, the next ``prefetch`` units' all-gathers are issued
  (FSDP's forward prefetch; depth 1 is what FSDP2's implicit prefetching achieves); after its
  forward the unit is resharded (``reshard_after_forward``; the root unit never is, as in FSDP);
- backward: all-gather again (unless still gathered), with backward prefetch of the next units in
  backward order (BACKWARD_PRE); when all the unit's gradients exist they are reduce-scattered to
  the shard owners and the unsharded parameters are freed (just after the gradients are made, in
  the post-backward hook); the unsharded gradients become the reduce-scatter input, which FSDP2
  keeps until the next unit's post-backward (``reduce_scatter_max_input_buffers`` = 1,
  ``_fsdp_param_group.post_backward``) or the end of backward;
- the optimizer updates the local shard after the last reduce-scatter.

Memory copies (FSDP2, ``torch.distributed.fsdp._fully_shard._fsdp_collectives``): the all-gather
output is one flat buffer, which ``foreach_all_gather_copy_out`` copies into the unit's parameter
tensors when compute first waits for the unit (a copy of the unit's full bytes, on the compute
stream, before its first layer runs); before a reduce-scatter, ``foreach_reduce_scatter_copy_in``
copies the unit's gradients into one flat input buffer (a copy of the unit's gradient bytes, after
its backward). Each costs ``2 x bytes / memory bandwidth`` (:meth:`StepContext.copy_time_s`) and
is placed on the compute stream (on CPU ranks everything runs on the training thread; on GPUs the
reduce-scatter copy-in runs on its own stream, which this slightly overstates). The shard's
copy-in before an all-gather (1/N of the unit) is left out.

Streams: FSDP2 issues all-gathers and reduce-scatters from streams of their own, so neither waits
for compute, but both run on the same process group, whose NCCL kernels ProcessGroupNCCL launches
on one internal stream per device: they execute one at a time, in issue order, as the plan's single
communication stream does. HSDP's cross-node all-reduce uses the replicate group's communicator.

Precision: ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` (``fsdp-mp``, FSDP's default here)
keeps the sharded parameters, gradients and optimizer state in fp32, casts the shard to the low
dtype in the all-gather copy-in, produces the unsharded gradients in the low dtype and casts them
to the reduce dtype in the reduce-scatter copy-in; DeepSpeed ZeRO-3 (``mixed``) gathers and reduces
in the low dtype and keeps an fp32 master copy of its shard.

Where the copies run: on GPUs the all-gather copy-in and the reduce-scatter copy-in run on FSDP2's
all-gather and reduce-scatter streams (so they lengthen the collective, not the compute) and the
copy-out on the compute stream; the shard's copy-in (1/N of the unit) is charged to its all-gather
everywhere. On CPU ranks (gloo) the rest runs on the training thread, gloo
has no averaging reduce op so FSDP2 divides the gradients before and after the reduce-scatter
(``_div_if_needed``: two more passes), and nothing overlaps: FSDP2 issues its all-gathers
(``unshard(async_op=False)``, backward prefetch included) and reduce-scatters without ``async_op``,
so on a device without streams each collective blocks the training thread until gloo is done
(``_fsdp_param_group.unshard`` / ``_fsdp_collectives.foreach_reduce``). Forward prefetch never
happens (the host cannot run ahead of itself), the backward prefetch of the next unit runs before
this unit's backward computes (its parameters are held meanwhile), and the next layer's compute
waits for each reduce-scatter.

The root module: FSDP2 keeps it gathered after forward when ``reshard_after_forward`` is left to
its default; passing ``True`` explicitly to the root reshards it too
(``TrainingConfig.reshard_root_after_forward``), so backward gathers it again.

Host work: FSDP2's hooks cost the host a number of operator dispatches per unit and per parameter
tensor each pass (:mod:`simcore.compute.overheads`), added to the unit's first compute operation;
on a GPU they only cost time when the unit's kernels are shorter.

Gradient accumulation: FSDP2 reduce-scatters every micro-batch's gradients by default; with
``gradient_sync_every_micro_batch=False`` (``set_requires_gradient_sync(False)`` before all but the
last micro-batch) the unsharded gradients accumulate in full and are reduced once.

The shard-boundary rule (the seed study, Ovi, arXiv 2505.12832, 2025): FSDP issues prefetches per unit from its hooks,
in the order units were recorded, so a unit whose boundary falls *inside* a transformer block
cannot be prefetched: its all-gather starts only when compute reaches it, an exposed round trip
in the middle of the block's forward and again in its backward. DeepSpeed ZeRO-3 gathers in traced
parameter order by prefetch buckets (``stage3_prefetch_bucket_size``), so its groups may split
blocks without this penalty. Its coordinator prefetches only while the parameters gathered or in
flight stay under ``stage3_max_live_parameters`` (:mod:`simcore.strategies.deepspeed`): a group
of that size or more (1e9 elements by default) leaves no room, and the group after it is gathered
on demand.

DeepSpeed as it ran in 2021 (``TrainingConfig.zero3_per_rank_lists``, :mod:`simcore.strategies.deepspeed`):
before each all-gather the host builds one list entry per rank, on the compute stream with the
device idle (each fetch synchronized it); a reduce-scatter's lists are built in the gradient hook,
beside the backward compute that makes the gradients (their host work starts with it, on the
communication queue), and the next fetch, on-demand gathers included, waits for the reduce-scatters
in flight, as its ``torch.cuda.synchronize()`` does. Each all-gather
first zero-fills its full buffer and each reduce-scatter first divides the full gradient in place
(:func:`~simcore.strategies.deepspeed.list_era_copies`), charged to the collective; each flush of
its contiguous-gradient bucket divides the whole bucket too
(:func:`~simcore.strategies.deepspeed.ipg_flushes`), charged to the reduce-scatter of the unit whose
gradient triggered it.

HSDP (:mod:`simcore.strategies.hsdp`) reuses this schedule with the shard group limited to a node
and an all-reduce of each reduce-scattered shard across nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcore.compute.fp8 import fp8_gather_bytes
from simcore.compute.host_syncs import launch_latency_s
from simcore.compute.memory import MemoryChange
from simcore.compute.overheads import framework_overheads
from simcore.compute.precision import Precision
from simcore.step.plan import COMM, Label, OpKey, PlanBuilder, RepeatSpan, StepPlan
from simcore.strategies.base import StepContext, Strategy, optimizer_state_bytes
from simcore.strategies.ddp import chunk_param_tensors
from simcore.strategies.deepspeed import (
    gathered_tensor_count,
    ipg_flushes,
    list_era_copies,
    per_rank_list_host_s,
    persistent_gather_host_s,
    persistent_sizes,
    prefetch_allowed,
    released_after_recompute,
    tensor_sizes,
    zero3_defaults,
)
from simcore.strategies.passes import (
    Chunk,
    PassHooks,
    add_collective,
    autocast_extras,
    build_microbatch,
    build_quiet_microbatches,
    make_chunks,
)
from simcore.strategies.wrap import UnitPlan, bucket_units, wrap_units

__all__ = ["FSDPStrategy", "ShardedHooks", "Zero3Strategy", "build_sharded_plan"]

# Labels of each unit's gradient collectives (the unit and micro-batch come from the key).
_REDUCE_COPY_IN = Label("reduce_scatter copy-in ", "unit")
_REDUCE_SCATTER = Label("reduce_scatter ", "unit")
_ACROSS_NODES = Label("all_reduce ", "unit", " shard across nodes")
_GATHER_LISTS = Label("all_gather per-rank lists (host) ", "unit")
_REDUCE_LISTS = Label("reduce_scatter per-rank lists (host) ", "unit")
_PERSISTENT_GATHER = "all_gather persistent parameters (after the step)"
_PERSISTENT_LOOP = "persistent parameters' per-rank copies (host)"


@dataclass(frozen=True, slots=True)
class UnitFacts:
    """What every micro-batch's :class:`ShardedHooks` of one plan reads about its units and chunks
    (derived once per plan, not per micro-batch; read only)."""

    unit_params: list[int]
    full_bytes: Sequence[float]  # bytes of each unit's all-gather (the gather dtype, FP8 where cast)
    grad_bytes: Sequence[float]  # its unsharded gradients
    reduce_bytes: Sequence[float]  # its reduce-scatter input
    unit_tensors: list[int]
    first_chunk_fwd: dict[int, int]  # unit -> index of its first chunk in forward
    first_chunk_bwd: dict[int, int]
    visits: list[int]  # the units in the order forward enters them
    visits_backward: list[int]  # ... and backward
    last_fwd_chunk: dict[int, int]
    last_bwd_chunk: dict[int, int]
    chunk_index: dict[int, int]  # id of a chunk -> its index
    gather_lists_s: list[float]  # host seconds of per-rank lists (DeepSpeed 2021), zeros when off
    reduce_lists_s: list[float]
    # flushes of DeepSpeed 2021's gradient bucket each unit's gradients trigger (zeros when off)
    ipg_flushes: list[int]


def unit_facts(
    ctx: StepContext,
    units: UnitPlan,
    chunks: Sequence[Chunk],
    precision: Precision,
    shards: int,
    per_rank_lists: bool,
) -> UnitFacts:
    """The :class:`UnitFacts` of a plan over ``units`` cut into ``chunks``, sharded ``shards`` ways."""
    unit_params = [ctx.layer_counts(members)[0] for members in units.units]
    gather, fp8 = precision.bytes("gather"), ctx.config.fp8
    full_bytes = (
        [fp8_gather_bytes(ctx.workload.layers, m, gather, fp8) for m in units.units]
        if fp8 != "none"
        else [p * gather for p in unit_params]  # no per-layer walk on the common path
    )
    unit_tensors = [chunk_param_tensors(ctx, members) for members in units.units]
    visits = [c.group for i, c in enumerate(chunks) if i == 0 or chunks[i - 1].group != c.group]
    return UnitFacts(
        unit_params=unit_params,
        full_bytes=full_bytes,
        grad_bytes=[p * precision.bytes("unsharded_grad") for p in unit_params],
        reduce_bytes=[p * precision.bytes("reduce") for p in unit_params],
        unit_tensors=unit_tensors,
        first_chunk_fwd={c.group: i for i, c in reversed(list(enumerate(chunks)))},
        first_chunk_bwd={c.group: i for i, c in enumerate(chunks)},
        visits=visits,
        visits_backward=visits[::-1],
        last_fwd_chunk={c.group: i for i, c in enumerate(chunks)},
        last_bwd_chunk={c.group: i for i, c in reversed(list(enumerate(chunks)))},
        chunk_index={id(c): i for i, c in enumerate(chunks)},
        **_per_rank_lists(ctx, units, unit_tensors, shards, per_rank_lists),
        ipg_flushes=_ipg_flushes(ctx, units, visits[::-1], shards, per_rank_lists),
    )


def _next_distinct(order: Sequence[int], start: int, count: int) -> list[int]:
    """The first ``count`` distinct units of ``order[start:]``, in order (without copying the rest)."""
    found: list[int] = []
    if count <= 0:
        return found
    for index in range(start, len(order)):
        unit = order[index]
        if unit not in found:
            found.append(unit)
            if len(found) == count:
                break
    return found


def _per_rank_lists(
    ctx: StepContext, units: UnitPlan, unit_tensors: Sequence[int], ranks: int, enabled: bool
) -> dict[str, list[float]]:
    """Host seconds of each unit's per-rank list collectives (DeepSpeed 2021,
    :func:`~simcore.strategies.deepspeed.per_rank_list_host_s`): its gathered tensors' all-gathers
    and all its tensors' reduce-scatters; zeros when off."""
    count = len(units.units)
    if not enabled or ranks <= 1:
        return {"gather_lists_s": [0.0] * count, "reduce_lists_s": [0.0] * count}
    launch = launch_latency_s()
    threshold = zero3_defaults().param_persistence_threshold
    layers = ctx.workload.layers
    gathers, reduces = [], []
    for unit, members in enumerate(units.units):
        gathered = gathered_tensor_count(((layers[i], ctx.layer_counts([i])[1]) for i in members), threshold)
        gathers.append(per_rank_list_host_s("all_gather", ranks, gathered, launch))
        reduces.append(per_rank_list_host_s("reduce_scatter", ranks, unit_tensors[unit], launch))
    return {"gather_lists_s": gathers, "reduce_lists_s": reduces}


def _ipg_flushes(
    ctx: StepContext, units: UnitPlan, backward: Sequence[int], ranks: int, enabled: bool
) -> list[int]:
    """Flushes of DeepSpeed 2021's contiguous-gradient bucket per unit
    (:func:`~simcore.strategies.deepspeed.ipg_flushes`): the units in the order backward enters
    them, each unit's layers in reverse, each layer's tensors bias first (its gradient needs only the
    output's); zeros when off."""
    counts = [0] * len(units.units)
    if not enabled or ranks <= 1:
        return counts
    layers = ctx.workload.layers
    order = list(dict.fromkeys(backward))
    groups = [
        [
            size
            for i in reversed(units.units[unit])
            for size in reversed(tensor_sizes(layers[i], ctx.layer_counts([i])[1]))
        ]
        for unit in order
    ]
    for unit, flushes in zip(order, ipg_flushes(groups, zero3_defaults().reduce_bucket_size), strict=True):
        counts[unit] = flushes
    return counts


class ShardedHooks(PassHooks):
    """All-gathers, prefetch, resharding and reduce-scatters of one micro-batch."""

    def __init__(
        self,
        ctx: StepContext,
        units: UnitPlan,
        chunks: Sequence[Chunk],
        *,
        shard_group: Sequence[int],
        replicate_group: Sequence[int],
        reshard_root: bool,
        first_micro: bool,
        micro_batch: int | None,
        precision: Precision,
        sync: bool = True,
        first_reduce: bool = True,
        allocate_unsharded: bool = True,
        unit_ops: tuple[float, float] = (0.0, 0.0),
        tensor_ops: tuple[float, float] = (0.0, 0.0),
        max_live_params: float = float("inf"),
        max_reuse: float | None = None,
        per_rank_lists: bool = False,
        facts: UnitFacts | None = None,
    ) -> None:
        self.ctx, self.units, self.micro_batch = ctx, units, micro_batch
        self.max_live_params = max_live_params  # DeepSpeed's bound on gathered parameters (deepspeed.py)
        # DeepSpeed's reuse distance: groups released after a block's recompute are gathered again
        # for their backward (None: FSDP, which gathers a unit once for both)
        self.max_reuse = max_reuse
        self.recomputed_blocks: set[int] = set()
        self.regather: list[int] = []  # groups to gather again once the block's recompute is done
        # each unit's operations in this micro-batch share one key
        self.unit_keys = [OpKey(group=unit, micro_batch=micro_batch) for unit in range(len(units.units))]
        self.shard_group, self.replicate_group = tuple(shard_group), tuple(replicate_group)
        self.reshard_root, self.first_micro = reshard_root, first_micro
        self.sync, self.first_reduce, self.allocate_unsharded = sync, first_reduce, allocate_unsharded
        self.precision = precision
        self.mp = precision
        self.tie_grad_bytes = precision.bytes("unsharded_grad")
        self.unit_ops, self.tensor_ops = unit_ops, tensor_ops
        facts = facts or unit_facts(ctx, units, chunks, precision, len(self.shard_group), per_rank_lists)
        self.unit_params, self.full_bytes = facts.unit_params, facts.full_bytes
        self.grad_bytes, self.reduce_bytes = facts.grad_bytes, facts.reduce_bytes
        self.shard_grad_element = precision.bytes("grad")
        self.on_cpu = ctx.device_kind == "cpu"
        self.unit_tensors = facts.unit_tensors
        self.first_chunk_fwd, self.first_chunk_bwd = facts.first_chunk_fwd, facts.first_chunk_bwd
        self.gathered: dict[int, int] = {}  # unit -> op id of the all-gather that made it resident
        self.copied: dict[int, int] = {}  # unit -> op id of the copy-out of its latest all-gather
        self.copies = len(self.shard_group) > 1
        self.visits, self.visits_backward = facts.visits, facts.visits_backward
        self.last_fwd_chunk, self.last_bwd_chunk = facts.last_fwd_chunk, facts.last_bwd_chunk
        self.chunk_index = facts.chunk_index
        self.pending = [len(m) for m in units.units]
        self.fwd_visit = -1
        self.bwd_visit = -1
        self.previous_group: int | None = None
        self.previous_bwd_group: int | None = None
        self.lingering = 0.0  # bytes of the reduce-scatter input FSDP2 still holds
        self.blocking: list[int] = []  # CPU: collectives the next compute waits for
        self.gather_lists_s, self.reduce_lists_s = facts.gather_lists_s, facts.reduce_lists_s
        # DeepSpeed 2021 synchronizes the device at each fetch: the next unit waits for every
        # collective in flight, its reduce-scatters included
        self.synchronized = per_rank_lists and len(self.shard_group) > 1
        # and passes over each full tensor before its collective (the gather buffer's zero fill,
        # the gradient's in-place division), in copies of its bytes
        ranks = len(self.shard_group) if self.synchronized else 1
        self.fill_copies = list_era_copies("all_gather", ranks)
        self.divide_copies = list_era_copies("reduce_scatter", ranks)
        # each flush of the gradient bucket divides the whole bucket (fp16): bytes per unit
        bucket = zero3_defaults().reduce_bucket_size * precision.bytes("unsharded_grad")
        self.bucket_divide_bytes = [flushes * bucket for flushes in facts.ipg_flushes]

    def _list_host(
        self, builder: PlanBuilder, label: Label, seconds: float, unit: int, after: Sequence[int]
    ) -> list[int]:
        """The host building a collective's per-rank lists, on the compute stream (the device is
        idle meanwhile: DeepSpeed synchronized it); ``[]`` when there is nothing to build."""
        if seconds <= 0.0:
            return []
        return [builder.compute(label, seconds, key=self.unit_keys[unit], kind="host", after=after)]

    def _reduce_lists_beside(self, builder: PlanBuilder, unit: int, op: int) -> list[int]:
        """DeepSpeed 2021's reduce-scatter lists, built while the unit's gradients compute: the
        gradient hooks (``reduce_partition_and_remove_grads``) run on the host as soon as autograd
        has queued the kernels that make the gradients, and stage3.py's reduction stream never waits
        for the compute stream (no ``wait_stream``; the next fetch's ``torch.cuda.synchronize()`` is
        what orders them). The host work starts with ``op`` and the reduce-scatter follows it, both
        ahead of the next fetch, on the communication queue the host feeds (compute is not slowed
        by it); ``[op]`` when there is nothing to build."""
        seconds = self.reduce_lists_s[unit]
        if seconds <= 0.0:
            return [op]
        key = self.unit_keys[unit]
        return [builder.add(COMM, _REDUCE_LISTS, seconds, key=key, kind="host", after_start=(op,))]

    # --- gathering -------------------------------------------------------------------------
    def _gather(
        self,
        builder: PlanBuilder,
        unit: int,
        phase: str,
        *,
        after: Sequence[int] = (),
        after_start: Sequence[int] = (),
    ) -> int:
        copy_in = self._gather_copies_s(unit)
        host = self._list_host(builder, _GATHER_LISTS, self.gather_lists_s[unit], unit, after)
        if not after_start:  # on demand: the gather waits for its lists (a prefetch runs beside compute)
            after = [*after, *host]
        op = add_collective(
            self.ctx,
            builder,
            "all_gather",
            self.full_bytes[unit],
            self.shard_group,
            builder.label("all_gather ", "unit", f" ({phase})"),
            key=self.unit_keys[unit],
            after=after,
            after_start=after_start,
            on_start=[("buffers", self.full_bytes[unit])],
            extra_s=copy_in,
        )
        self.gathered[unit] = op
        self.copied.pop(unit, None)
        return op

    def _gather_copies_s(self, unit: int) -> float:
        """Device work on the all-gather's stream before it: the shard's copy-in (and cast to the
        gather dtype) and, DeepSpeed 2021, the zero fill of the full buffer; none on one rank."""
        if not self.copies:
            return 0.0
        shard = self.unit_params[unit] / len(self.shard_group)
        copy_in = self.ctx.copy_time_s(shard * (self.mp.bytes("param") + self.mp.bytes("gather")) / 2)
        return copy_in + self.ctx.copy_time_s(self.full_bytes[unit] * self.fill_copies)

    def _prefetch(
        self,
        builder: PlanBuilder,
        order: Sequence[int],
        position: int,
        op: int | None,
        phase: str,
        blocked: frozenset[int],
        after: Sequence[int] = (),
    ) -> list[int]:
        """Gather the next ``prefetch`` units of ``order`` after ``position``: alongside compute op
        ``op`` (it starts them), or, with ``op`` None, after ``after`` (a blocking prefetch)."""
        depth = self.ctx.config.prefetch
        issued: list[int] = []
        if not prefetch_allowed((self.unit_params[u] for u in self.gathered), self.max_live_params):
            return issued  # DeepSpeed: the gathered parameters already reach max_live_parameters
        for unit in _next_distinct(order, position + 1, depth):
            if unit not in self.gathered and unit not in blocked and self.pending[unit] > 0:
                starts = [op] if op is not None else []
                issued.append(self._gather(builder, unit, phase, after=after, after_start=starts))
        return issued

    def _ensure(
        self, builder: PlanBuilder, units: Sequence[int], previous: int | None, phase: str
    ) -> list[int]:
        blocking, self.blocking = self.blocking, []
        waits = list(blocking)
        # DeepSpeed 2021: _allgather_param synchronizes the device before it builds the lists, so an
        # on-demand gather also waits for the reduce-scatters in flight
        synced = blocking if self.synchronized and not self.on_cpu else []
        for unit in dict.fromkeys(units):
            if unit not in self.gathered:
                first = [previous] if previous is not None else []
                self._gather(builder, unit, phase + ", on demand", after=[*first, *synced])
            waits.append(self._copied_out(builder, unit, phase, after=blocking))
        return waits

    def _copied_out(self, builder: PlanBuilder, unit: int, phase: str, after: Sequence[int] = ()) -> int:
        """The op after which the unit's gathered parameters are usable: its copy-out (FSDP2),
        run after ``after`` too (on CPU: the collectives that block the training thread)."""
        gather = self.gathered[unit]
        if not self.copies:
            return gather
        if unit not in self.copied:
            self.copied[unit] = builder.compute(
                builder.label("all_gather copy-out ", "unit", f" ({phase})"),
                self.ctx.copy_time_s(self.full_bytes[unit]),
                key=self.unit_keys[unit],
                kind="copy",
                after=[gather, *after],
            )
        return self.copied[unit]

    def _resharded_after_forward(self, unit: int) -> bool:
        if self.units.has_root and unit == 0:
            return self.reshard_root
        return self.ctx.config.reshard_after_forward

    # --- forward ---------------------------------------------------------------------------
    def before_forward(self, builder: PlanBuilder, chunk: Chunk, previous_op: int | None) -> list[int]:
        return self._ensure(builder, [chunk.group], previous_op, "forward")

    def forward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        unit = chunk.group
        if self.last_fwd_chunk[unit] == self.chunk_index[id(chunk)] and self._resharded_after_forward(unit):
            return [("buffers", -self.full_bytes[unit])]
        return []

    def forward_started(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        unit = chunk.group
        if unit != self.previous_group:
            self.fwd_visit += 1
            if not self.on_cpu:  # implicit prefetch needs a host that runs ahead of the device
                self._prefetch(
                    builder, self.visits, self.fwd_visit, op, "forward prefetch", self.units.mid_block_forward
                )
        self.previous_group = unit
        if self.last_fwd_chunk[unit] == self.chunk_index[id(chunk)] and self._resharded_after_forward(unit):
            del self.gathered[unit]

    def extras(self, ctx: StepContext, chunk: Chunk, phase: str) -> tuple[float, float, list[MemoryChange]]:
        """Autocast's casts, plus FSDP2's per-unit and per-tensor hook work on a unit's first chunk
        of each pass (its pre-forward / pre-backward and post hooks)."""
        seconds, ops, changes = autocast_extras(ctx, chunk, phase, self.precision)
        index, unit = self.chunk_index.get(id(chunk)), chunk.group
        first = self.first_chunk_bwd if phase == "bwd" else self.first_chunk_fwd
        if (
            phase != "recompute"
            and index is not None
            and first.get(unit) == index
            and len(self.shard_group) > 1
        ):
            which = 1 if phase == "bwd" else 0
            ops += self.unit_ops[which] + self.tensor_ops[which] * self.unit_tensors[unit]
        return seconds, ops, changes

    # --- backward --------------------------------------------------------------------------
    def before_backward(
        self, builder: PlanBuilder, layers: Sequence[int], previous_op: int | None
    ) -> list[int]:
        unit_of = self.units.unit_of_layer
        units = [unit_of[i] for i in layers]
        self._regather(builder, previous_op)
        waits = self._ensure(builder, units, previous_op, "backward")
        self._plan_regather(layers, units)
        if self.on_cpu and units and units[0] != self.previous_bwd_group:
            # FSDP2's backward prefetch blocks on CPU: the next unit is gathered before this one
            # computes (its memory is held alongside, as on a GPU)
            waits += self._prefetch(
                builder, self.visits_backward, self.bwd_visit + 1, None, "backward prefetch",
                self.units.mid_block_backward, after=[*waits, *([previous_op] if previous_op is not None else [])],
            )  # fmt: skip
        return waits

    def _plan_regather(self, layers: Sequence[int], units: Sequence[int]) -> None:
        """DeepSpeed with activation checkpointing: the first call of a block's backward is its
        recompute; the groups the reuse rule releases after it are gathered again afterwards."""
        if self.max_reuse is None or self.on_cpu or not self.ctx.config.activation_checkpointing:
            return
        block = self.ctx.workload.layers[layers[0]].block if layers else -1
        if block < 0 or block in self.recomputed_blocks:
            return
        self.recomputed_blocks.add(block)
        groups = [(u, self.unit_params[u]) for u in dict.fromkeys(units)]
        self.regather = released_after_recompute(groups, self.max_reuse) if len(self.shard_group) > 1 else []

    def _regather(self, builder: PlanBuilder, previous_op: int | None) -> None:
        """The released groups' second all-gathers, after the recompute (``previous_op``), in
        backward order; each group's backward then waits for its second gather. Its buffer is
        counted as held in between (DeepSpeed frees it: the peak is slightly overstated)."""
        regather, self.regather = self.regather, []
        for unit in reversed(regather):
            if unit not in self.gathered:
                continue
            previous = [previous_op] if previous_op is not None else []
            after = (
                self._list_host(builder, _GATHER_LISTS, self.gather_lists_s[unit], unit, previous) or previous
            )
            op = add_collective(
                self.ctx, builder, "all_gather", self.full_bytes[unit], self.shard_group,
                builder.label("all_gather ", "unit", " (backward, again after recompute)"),
                key=self.unit_keys[unit], after=after, extra_s=self._gather_copies_s(unit),
            )  # fmt: skip
            self.gathered[unit] = op
            self.copied.pop(unit, None)

    def backward_memory(self, chunk: Chunk) -> list[MemoryChange]:
        if not self.allocate_unsharded:  # accumulating into the unsharded gradients already held
            return []
        return [("buffers", self.ctx.layer_counts(chunk.layers)[0] * self.tie_grad_bytes)]

    def backward_released(self, chunk: Chunk) -> list[MemoryChange]:
        # post-backward reshards the unit once autograd has made its unsharded gradients
        if self.last_bwd_chunk[chunk.group] == self.chunk_index[id(chunk)]:
            return [("buffers", -self.full_bytes[chunk.group])]
        return []

    def backward_started(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        unit = chunk.group
        if unit != self.previous_bwd_group:
            self.bwd_visit += 1
            order = self.visits_backward
            if not self.on_cpu:  # on CPU it blocks: issued before the compute (before_backward)
                self._prefetch(
                    builder, order, self.bwd_visit, op, "backward prefetch", self.units.mid_block_backward
                )
        self.previous_bwd_group = unit

    def backward_done(self, builder: PlanBuilder, chunk: Chunk, op: int) -> None:
        unit = chunk.group
        self.pending[unit] -= len(chunk.layers)
        if self.pending[unit] > 0:
            return
        self.gathered.pop(unit, None)
        if not self.sync:
            return  # set_requires_gradient_sync(False): the unsharded gradients accumulate
        self._reduce(builder, unit, op)

    def _reduce(self, builder: PlanBuilder, unit: int, op: int) -> None:
        """The unit's reduce-scatter (and, for HSDP, the all-reduce of its shard across nodes)."""
        shards = len(self.shard_group)
        shard = self.unit_params[unit] / shards * self.shard_grad_element
        # The unsharded gradients become the reduce-scatter input, which FSDP2 keeps until the next
        # unit's post-backward (reduce_scatter_max_input_buffers = 1) or the end of backward; with
        # one rank nothing is reduced and the gradients go at once.
        on_start: list[MemoryChange] = [("buffers", -self.lingering)] if self.lingering else []
        self.lingering = self.grad_bytes[unit] if self.copies else 0.0
        on_end: list[MemoryChange] = [("buffers", -self.grad_bytes[unit] + self.lingering)]
        if not any(self.pending):  # the last unit: backward's final callback frees every input
            on_end.append(("buffers", -self.lingering))
            self.lingering = 0.0
        if self.first_reduce:
            on_end.append(("grads", shard))
        copy_s = 0.0
        if self.copies:
            # copy-in (with the cast to the reduce dtype) into the flat input; gloo: pre/post divide
            passes = (self.grad_bytes[unit] + self.reduce_bytes[unit]) / 2
            if self.on_cpu:
                passes += self.reduce_bytes[unit] + self.reduce_bytes[unit] / shards
            passes += self.reduce_bytes[unit] * self.divide_copies + self.bucket_divide_bytes[unit]
            copy_s = self.ctx.copy_time_s(passes)
        if self.copies and self.on_cpu:
            op = builder.compute(
                _REDUCE_COPY_IN,
                copy_s,
                key=self.unit_keys[unit],
                kind="copy",
                after=[op],
            )
            copy_s = 0.0
        if self.synchronized and not self.on_cpu:
            after = self._reduce_lists_beside(builder, unit, op)
        else:
            after = self._list_host(builder, _REDUCE_LISTS, self.reduce_lists_s[unit], unit, [op]) or [op]
        rs = add_collective(
            self.ctx,
            builder,
            "reduce_scatter",
            self.reduce_bytes[unit],
            self.shard_group,
            _REDUCE_SCATTER,
            key=self.unit_keys[unit],
            after=after,
            on_start=on_start,
            on_end=on_end,
            extra_s=copy_s,
        )
        if len(self.replicate_group) > 1:
            rs = add_collective(
                self.ctx,
                builder,
                "all_reduce",
                self.unit_params[unit] / shards * self.mp.bytes("reduce"),
                self.replicate_group,
                _ACROSS_NODES,
                key=self.unit_keys[unit],
                after=[rs],
            )
        if self.on_cpu or self.synchronized:
            self.blocking.append(rs)


def build_sharded_plan(
    ctx: StepContext,
    strategy: Strategy,
    units: UnitPlan,
    *,
    shard_group: Sequence[int],
    replicate_group: Sequence[int] = (),
    reshard_root: bool = False,
) -> StepPlan:
    """``strategy``'s (FSDP, ZeRO-3, HSDP) step over ``units``, sharded over ``shard_group``.

    Its ``framework``: ``torch-fsdp`` (FSDP2; DTensor parameters, FSDP2's hooks) or ``deepspeed``
    (ZeRO-3: flat fp32 partitions, DeepSpeed's module hooks).
    """
    cfg, params = ctx.config, ctx.model_counts()[0]
    name, deepspeed = strategy.name, strategy.framework == "deepspeed"
    precision = ctx.precision(strategy)
    shards = len(shard_group)
    builder = PlanBuilder(name)
    builder.plan.fragmentation = cfg.fragmentation(ctx.device_kind)
    builder.plan.initial_memory = {
        "params": params * precision.bytes("param") / shards,
        "optimizer": params * optimizer_state_bytes(precision, cfg.optimizer) / shards,
        "overhead": cfg.runtime_overhead_bytes(ctx.device_kind, 1 + (len(replicate_group) > 1)),
    }
    chunks = make_chunks(ctx, units.unit_of_layer)
    k = ctx.accumulation
    alone = ctx.gpus == 1
    quiet = k - 1 if alone else 0
    full_grads = params * precision.bytes("grad")
    last = build_quiet_microbatches(ctx, builder, quiet, [("grads", full_grads)], precision)
    overheads = framework_overheads()
    unit_ops = overheads.zero3_unit_ops if deepspeed else overheads.fsdp2_unit_ops
    tensor_ops = (0.0, 0.0) if deepspeed else overheads.fsdp2_tensor_ops
    every = cfg.gradient_sync_every_micro_batch
    max_live, max_reuse = float("inf"), None
    if deepspeed:
        limit, reuse = cfg.zero3_max_live_params, cfg.zero3_max_reuse_distance
        max_live = float(limit if limit is not None else zero3_defaults().max_live_parameters)
        max_reuse = float(reuse if reuse is not None else zero3_defaults().max_reuse_distance)
    facts = unit_facts(ctx, units, chunks, precision, shards, deepspeed and cfg.zero3_per_rank_lists)
    built: tuple[tuple[bool, ...], RepeatSpan] | None = None  # the last micro-batch's settings and span
    for micro in range(quiet, k):
        number = micro + 1 if k > 1 else None  # labels name micro-batches only when there are several
        final = micro == k - 1
        # (first_micro, sync, first_reduce, allocate_unsharded): all the hooks' settings that vary
        settings = (micro == 0, every or final, micro == 0 if every else final, every or micro == quiet)
        if built is not None and built[0] == settings:
            # the same hooks on the same state: the previous micro-batch's operations, renumbered
            span = builder.repeat(built[1], last)
            if span is not None:
                built, last = (settings, span), span.last
                continue
        start = len(builder.plan.ops)
        hooks = ShardedHooks(
            ctx, units, chunks, shard_group=shard_group, replicate_group=replicate_group,
            reshard_root=reshard_root, first_micro=settings[0], micro_batch=number, precision=precision,
            sync=settings[1], first_reduce=settings[2], allocate_unsharded=settings[3], unit_ops=unit_ops,
            tensor_ops=tensor_ops, max_live_params=max_live, max_reuse=max_reuse,
            per_rank_lists=deepspeed and cfg.zero3_per_rank_lists, facts=facts,
        )  # fmt: skip
        previous, last = last, build_microbatch(ctx, builder, chunks, hooks, number, last)
        built = (settings, RepeatSpan(start, len(builder.plan.ops), previous, last, number))
    after = [builder.last_comm] if builder.last_comm is not None else []
    step = ctx.optimizer_step(strategy, params / shards, shards, flat=deepspeed)
    stepped = builder.compute(
        "optimizer step",
        step.seconds,
        kind="optimizer",
        after=after,
        on_start=[("temp", step.scratch_bytes)],
        on_end=[("grads", -full_grads / shards), ("temp", -step.scratch_bytes)],
    )
    if deepspeed and cfg.zero3_per_rank_lists and shards > 1:
        _persistent_gather(ctx, builder, shard_group, precision, stepped)
    return builder.plan


def _persistent_gather(
    ctx: StepContext, builder: PlanBuilder, group: Sequence[int], precision: Precision, stepped: int
) -> None:
    """DeepSpeed 2021's re-gather of the persistent parameters after the optimizer step
    (:func:`~simcore.strategies.deepspeed.persistent_gather_host_s`): one flat all-gather of them
    and the host's per-rank copy loop, the device waiting (the call is synchronous)."""
    layers = ctx.workload.layers
    sizes = persistent_sizes(
        ((layers[i], ctx.layer_counts([i])[1]) for i in range(len(layers))),
        zero3_defaults().param_persistence_threshold,
    )
    if not sizes:
        return
    gather = add_collective(
        ctx, builder, "all_gather", sum(sizes) * precision.bytes("gather"), group,
        _PERSISTENT_GATHER, after=[stepped],
    )  # fmt: skip
    seconds = persistent_gather_host_s(sizes, len(group), launch_latency_s())
    builder.compute(_PERSISTENT_LOOP, seconds, kind="host", after=[gather])


class FSDPStrategy:
    """PyTorch FSDP: units from the wrap policy, prefetch by unit, root kept gathered."""

    name = "fsdp"
    description = "FSDP: fully sharded; per-unit all-gather (prefetched) and reduce-scatter"
    framework = "torch-fsdp"
    zero_stage = 3
    shard_scope = "world"
    communicates_every_microbatch = True  # reduce-scatters every micro-batch (FSDP2's default)

    def assumption_note(self, ctx: StepContext) -> str:
        return ""

    def layer_groups(self, ctx: StepContext) -> list[int]:
        """The unit of each layer (see fastpath.fold)."""
        return list(wrap_units(ctx.workload, ctx.config.wrap, ctx.caches.unit_plans).unit_of_layer)

    def build_plan(self, ctx: StepContext) -> StepPlan:
        return build_sharded_plan(
            ctx,
            self,
            wrap_units(ctx.workload, ctx.config.wrap, ctx.caches.unit_plans),
            shard_group=ctx.world,
            reshard_root=ctx.config.reshard_root_after_forward,
        )


class Zero3Strategy:
    """DeepSpeed ZeRO-3: gathers in prefetch buckets of parameters, everything resharded."""

    name = "zero3"
    description = "ZeRO-3: fully sharded; gathers in parameter buckets (DeepSpeed), all resharded"
    framework = "deepspeed"
    zero_stage = 3
    shard_scope = "world"
    communicates_every_microbatch = True

    def assumption_note(self, ctx: StepContext) -> str:
        limit = ctx.config.zero3_max_live_params
        bound = limit if limit is not None else zero3_defaults().max_live_parameters
        units = bucket_units(ctx.workload, ctx.config.zero3_prefetch_bucket_params, ctx.caches.unit_plans)
        largest = max(ctx.layer_counts(members)[0] for members in units.units)
        notes = []
        if ctx.gpus > 1 and largest >= bound:
            notes.append(
                f"zero3: a gather group of {largest:.3g} elements reaches stage3_max_live_parameters "
                f"({bound:.3g}): DeepSpeed prefetches nothing while it is gathered, the next group waits"
            )
        if ctx.gpus > 1 and ctx.config.zero3_per_rank_lists:
            notes.append(
                "zero3: DeepSpeed 2021's per-rank lists: every tensor's all-gather and reduce-scatter "
                f"builds {ctx.gpus} entries on the host, with the device synchronized at each fetch"
            )
        return "; ".join(notes)

    def layer_groups(self, ctx: StepContext) -> list[int]:
        """The prefetch bucket of each layer (see fastpath.fold)."""
        return list(
            bucket_units(
                ctx.workload, ctx.config.zero3_prefetch_bucket_params, ctx.caches.unit_plans
            ).unit_of_layer
        )

    def build_plan(self, ctx: StepContext) -> StepPlan:
        units = bucket_units(ctx.workload, ctx.config.zero3_prefetch_bucket_params, ctx.caches.unit_plans)
        return build_sharded_plan(ctx, self, units, shard_group=ctx.world, reshard_root=True)
