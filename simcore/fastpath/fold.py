"""Deep models folded: a step over a long run of identical blocks, from two shallower copies.

A transformer's blocks are identical, and the step plans of DDP, FSDP, HSDP and ZeRO-3 treat them
alike: per block (FSDP units, compute chunks) or in groups whose boundaries repeat every ``p``
blocks (DDP's gradient buckets, ZeRO-3's prefetch buckets). Where a long run of blocks is in a
steady state, it adds the same to the step per ``p`` blocks, as a long gradient accumulation adds
the same per micro-batch (:mod:`simcore.fastpath.step`): the step time, compute, communication,
bytes, link use and every phase's memory footprint are affine in the depth. So the step of a
model whose run has ``R`` blocks is evaluated on two copies with ``n`` and ``n + p`` blocks of the
run (its first :data:`HEAD` blocks and its last ones, with their names) and extrapolated to ``R``.

Affine is not assumed: the deeper copy's own blocks are checked to be in a steady state
(:func:`~simcore.fastpath.repeat.block_slopes`): in every pass over the blocks, two consecutive
windows of ``p`` blocks are the same operations, run one period apart on both streams, their
memory samples one period apart and one constant apart, nothing earlier still running. The
scheduler is deterministic and invariant under a shift in time, so each further period repeats
the last exactly; the two copies' step times must differ by the sum of those periods. A comm
stream whose backlog shrinks block by block (the comm stream of a deep DDP step, queued behind
its backward by a little less per block) is refused, as it stops queueing at some depth past the
copies (three copies all short of that depth were once affine and wrong by 0.12%); one whose
backlog grows is accepted only where the step stays bound by it at any depth (see
:mod:`simcore.fastpath.repeat`).

A copy's plan must be the model's with whole periods of blocks removed. So operations over the
whole model take the model's own time in every copy (the optimizer update, and no-sync
micro-batches run as one operation: :attr:`~simcore.strategies.base.StepContext.whole`): their
durations are maxima and roundings of the model's totals (kernels against dispatch, launch
counts), not affine in the depth. Strategies whose collectives are as large as the model (ZeRO-1
and ZeRO-2 reduce the model in one bucket unless it outgrows 5e8 elements, and gather it back;
their algorithm and protocol change with the size) name no grouping and are not folded.

Folding is refused, and the whole plan evaluated, unless all of this holds:

- the run is at least :data:`MIN_RUN` blocks, and the two copies together have at most two
  thirds of its blocks;
- the strategy names its grouping across layers (``layer_groups``), the grouping repeats every
  ``p <= MAX_PERIOD`` blocks between the copies' ends, and each copy's own grouping is the
  model's with the removed blocks cut out (``R - n`` is a multiple of ``p``); explicit wrap
  indices and parameter ties into the removed blocks are refused;
- the deeper copy's blocks repeat (above), and the copies' step times differ by its periods (to
  :data:`SLOPE_TOLERANCE` of the step time); or, where they do not (a comm backlog growing per
  block whose collectives run slower under compute: the step rises by less than the comm
  stream's period, and the shallower copy may not be behind yet), a copy a period deeper still,
  its blocks checked too, rises by what the deeper copy rose, and those two are folded.

The memory peak is the largest of the extrapolated per-phase peaks of the phases the two copies
share (group numbers named by blocks, :class:`_Names`), with that phase's categories; each copy's
own peak must be one of them. A phase inside the removed blocks needs no copy of its own: its
footprint is affine in the block index, so its largest value is at a kept block.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from simcore.compute.memory import MemoryPeak, allocator_peak
from simcore.report import LinkBusy, StepReport
from simcore.step.caches import Recent
from simcore.step.plan import OpKey, Phase, PhasePart, phase_text
from simcore.strategies.base import StepContext, Strategy, model_flops_per_step
from simcore.workload.types import Layer, Workload

__all__ = [
    "HEAD",
    "MAX_PERIOD",
    "MIN_RUN",
    "FoldCheck",
    "Measured",
    "fold_step",
    "identical_run",
    "shallower",
]

HEAD = 2  # blocks kept at the start of the run; the rest of a copy's blocks are the run's last ones
MIN_DEPTH = 4  # blocks of the shallowest copy (transients at both ends: prefetch, the first bucket)
MAX_PERIOD = 8  # longest repeat of a grouping, in blocks, that is still worth folding
MIN_RUN = 24  # two copies of 4 and 5 blocks cost 9: worth it from here (GPT-2 medium, BERT-large) on
SLOPE_TOLERANCE = 1e-9  # of the step time: the copies' difference against the deeper copy's own slope

# The check a copy's blocks get (simcore.fastpath.repeat.block_slopes): the period of the
# grouping, in blocks, and the copy's run of identical blocks (its first block, its blocks).
FoldCheck = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Measured:
    """One evaluated step: the report, and what extrapolating it needs besides.

    ``busy``: seconds each link kind and link carried a collective;
    ``phase_peaks``: per phase (as the report would name it, each once) its largest footprint of tensors,
    when that was first reached, and the categories then; ``fragmentation``: the allocator's, as
    the plan charges it at the peak; ``slope``: what one more period of blocks adds to the step
    time, where the copy's blocks were checked and repeat (None otherwise)."""

    report: StepReport
    busy: LinkBusy
    phase_peaks: Sequence[tuple[Phase, tuple[float, float, Mapping[str, float]]]]
    fragmentation: float
    slope: float | None = None


@dataclass(frozen=True, slots=True)
class _Copy:
    workload: Workload
    kept: tuple[int, ...]  # the model's index of each of the copy's layers


def _signature(layer: Layer) -> tuple[object, ...]:
    return (
        layer.kind, layer.params, layer.fwd_flops, layer.bwd_flops, layer.activation_bytes,
        layer.output_bytes, layer.memory_bytes, layer.gemm, layer.bwd_bytes_ratio, layer.serial_fraction,
    )  # fmt: skip


def identical_run(workload: Workload, known: Recent[object] | None = None) -> tuple[int, int] | None:
    """(first block, blocks) of the longest run of consecutive identical blocks, None if none
    (kept in ``known`` when given: :attr:`~simcore.step.caches.StepCaches.runs`)."""
    if known is not None:
        return known.of(workload, ("run",), lambda: identical_run(workload))  # type: ignore[return-value]
    layers_of: dict[int, list[int]] = {}
    for index, layer in enumerate(workload.layers):
        if layer.block >= 0:
            layers_of.setdefault(layer.block, []).append(index)
    blocks = sorted(layers_of)
    contiguous = all(
        layers_of[b][-1] + 1 == layers_of[c][0] and c == b + 1 for b, c in itertools.pairwise(blocks)
    )
    best: tuple[int, int] | None = None
    if blocks and contiguous:
        shapes = [tuple(_signature(workload.layers[i]) for i in layers_of[b]) for b in blocks]
        start = 0
        for end in range(1, len(blocks) + 1):
            if end == len(blocks) or shapes[end] != shapes[start]:
                if best is None or end - start > best[1]:
                    best = (blocks[start], end - start)
                start = end
    return best


def shallower(
    workload: Workload, run: tuple[int, int], depth: int, known: Recent[object] | None = None
) -> _Copy | None:
    """``workload`` with ``depth`` blocks of ``run`` (the first :data:`HEAD` and the last ones);
    None when a parameter tie reaches into the removed blocks (kept in ``known`` when given:
    :attr:`~simcore.step.caches.StepCaches.copies`)."""
    if known is not None:
        return known.of(workload, (run, depth), lambda: shallower(workload, run, depth))  # type: ignore[return-value]
    first, length = run
    dropped = set(range(first + HEAD, first + length - (depth - HEAD)))
    kept = tuple(i for i, layer in enumerate(workload.layers) if layer.block not in dropped)
    new_index = {old: new for new, old in enumerate(kept)}
    copy: _Copy | None = None
    if all(i in new_index for tie in workload.ties for i in tie.layers):
        blocks = [b for b in range(len(workload.block_names)) if b not in dropped]
        new_block = {old: new for new, old in enumerate(blocks)}
        layers = tuple(
            replace(layer, block=new_block[layer.block] if layer.block >= 0 else -1)
            for layer in (workload.layers[i] for i in kept)
        )
        ties = tuple(replace(tie, layers=tuple(new_index[i] for i in tie.layers)) for tie in workload.ties)
        copy = _Copy(
            replace(
                workload,
                layers=layers,
                block_names=tuple(workload.block_names[b] for b in blocks),
                ties=ties,
                dims=None
                if workload.dims is None
                else replace(workload.dims, layers=workload.dims.layers - len(dropped)),
            ),
            kept,
        )
    return copy


def _boundaries(groups: Sequence[int]) -> list[bool]:
    return [i == 0 or groups[i] != groups[i - 1] for i in range(len(groups))]


def _period(groups: Sequence[int], workload: Workload, run: tuple[int, int], depth: int) -> int | None:
    """Blocks after which the grouping's boundaries repeat, from the last head block to the first
    tail block a copy of ``depth`` blocks keeps (None above :data:`MAX_PERIOD`)."""
    first, length = run
    starts = [i for i, layer in enumerate(workload.layers) if layer.block == first]
    size = len(starts)
    begin = starts[0] + (HEAD - 1) * size
    end = starts[0] + (length - (depth - HEAD) + 1) * size
    flags = _boundaries(groups)
    for period in range(1, MAX_PERIOD + 1):
        shift = period * size
        if all(flags[i] == flags[i + shift] for i in range(begin, end - shift)):
            return period
    return None


class _CopyTimer:
    """The model's compute model, answering for a copy's layers with the model's own per-layer
    times (the copy's layers are the model's with blocks removed, and a layer's time is its own:
    the same numbers the timer derives for the copy, without deriving them for every copy of every
    context). Anything else is the model's timer's."""

    __slots__ = ("_copy", "_kept", "_model", "_timer")

    def __init__(self, timer: Any, model: Workload, copy: _Copy) -> None:
        self._timer, self._model, self._copy, self._kept = timer, model, copy.workload, list(copy.kept)

    def layer_parts_s(self, workload: Workload, batch: int, phase: str) -> tuple[Any, Any]:
        if workload is not self._copy:
            return self._timer.layer_parts_s(workload, batch, phase)
        kernel, host = self._timer.layer_parts_s(self._model, batch, phase)
        return kernel[self._kept], host[self._kept]

    def layer_times_s(self, workload: Workload, batch: int, phase: str) -> Any:
        if workload is not self._copy:
            return self._timer.layer_times_s(workload, batch, phase)
        return self._timer.layer_times_s(self._model, batch, phase)[self._kept]

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        return float(self._timer.layer_time_s(layer, batch, phase))

    def optimizer_time_s(self, params: int, optimizer: str) -> float:
        return float(self._timer.optimizer_time_s(params, optimizer))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._timer, name)


def _copy_timer(ctx: StepContext, copy: _Copy) -> Any:
    """``ctx``'s timer for the copy: a :class:`_CopyTimer` where the timer times a workload's layers
    at once (the compute model; a test double that times one layer at a time is kept as it is)."""
    timer = ctx.timer
    if getattr(timer, "layer_parts_s", None) is None or getattr(timer, "layer_times_s", None) is None:
        return timer
    return _CopyTimer(timer, ctx.workload, copy)


def _context(ctx: StepContext, depth: int, copy: _Copy) -> StepContext:
    """``ctx`` on the copy: its own per-layer caches, kept in ``ctx``'s (so shared by every context
    that shares those, as a sweep's configurations do), and per-layer times the model's."""
    layer_times, memo, timer = ctx.memo(("fold copy caches", depth), lambda: ({}, {}, _copy_timer(ctx, copy)))
    return replace(ctx, workload=copy.workload, timer=timer, _layer_times=layer_times, _memo=memo, whole=ctx)


def _affine(values: Sequence[float], steps: float) -> float:
    """The value ``steps`` periods past the first of two, one period apart (affine in the depth:
    the deeper copy's blocks were checked to repeat)."""
    a, b = values
    return a + steps * (b - a)


# A phase's operation as the same in every copy and the model: its label, micro-batch, stage and
# where its group starts (see _Names._where); None for no operation.
_CanonicalPart = tuple[object, int | None, int | None, tuple[object, ...] | None] | None
# (the name of the block the phase's compute runs, or None; its compute; its collective)
Canonical = tuple[str | None, _CanonicalPart, _CanonicalPart]


class _Names:
    """Memory phases (:data:`~simcore.step.plan.Phase`) with their group numbers in terms
    of blocks, so that the same phase is the same in every copy and in the model.

    A group is named by its first layer: a layer outside the blocks by its name, one in a block by
    the block and its offset there; when the phase's compute runs a block (its anchor: the
    backward of block30 while unit 31 is gathered), relative to the anchor, as the copies and the
    model order their blocks alike around it (the prefetched neighbour of a copy's first tail block
    is its last head block, which the model's period makes the same). Blocks are named by their
    names, which a copy keeps; the numbers come from the operations' keys, never from labels."""

    def __init__(self, workload: Workload, groups: Sequence[int]) -> None:
        self.workload, self.groups = workload, tuple(groups)
        self.first_layer: dict[int, int] = {}
        for index, group in enumerate(groups):
            self.first_layer.setdefault(group, index)
        self.block_start: dict[int, int] = {}
        self.layer_index: dict[str, int] = {}
        for index, layer in enumerate(workload.layers):
            self.block_start.setdefault(layer.block, index)
            self.layer_index.setdefault(layer.name, index)
        self.block_index = {name: b for b, name in enumerate(workload.block_names)}

    def canonical(self, phase: Phase) -> Canonical:
        compute, comm = phase
        if compute is None:
            anchor = None
            first: _CanonicalPart = None
        else:
            label, key = compute
            anchor = key.block
            where = None if key.group is None else self._where(key.group, anchor)
            first = (label, key.micro_batch, key.stage, where)
        second: _CanonicalPart = None
        if comm is not None:
            label, key = comm
            where = None if key.group is None else self._where(key.group, anchor)
            second = (label, key.micro_batch, key.stage, where)
        return (None if anchor is None else self.workload.block_names[anchor], first, second)

    def _where(self, group: int, anchor: int | None) -> tuple[object, ...]:
        layer = self.first_layer.get(group)
        if layer is None:  # not a group of this grouping: kept as it is
            return ("group", group)
        block = self.workload.layers[layer].block
        if block < 0:
            return ("layer", self.workload.layers[layer].name)
        offset = layer - self.block_start[block]
        if anchor is not None:
            return ("relative", block - anchor, offset)
        return ("block", self.workload.block_names[block], offset)

    def named(self, canonical: Canonical) -> str | None:
        """The phase as this workload names it; None if a group or block it names is not here."""
        anchor_name, compute, comm = canonical
        anchor = None if anchor_name is None else self.block_index.get(anchor_name)
        if anchor_name is not None and anchor is None:
            return None
        parts: list[PhasePart | None] = []
        for part, block in ((compute, anchor), (comm, None)):
            if part is None:
                parts.append(None)
                continue
            label, micro, stage, where = part
            group = None if where is None else self._group(where, anchor)
            if where is not None and group is None:
                return None
            parts.append((label, OpKey(group, micro, block, stage)))  # type: ignore[arg-type]
        return phase_text((parts[0], parts[1]))

    def _group(self, where: tuple[object, ...], anchor: int | None) -> int | None:
        kind = where[0]
        if kind == "group":
            return int(where[1])  # type: ignore[call-overload]
        if kind == "layer":
            layer = self.layer_index.get(str(where[1]))
        else:
            block = self.block_index.get(str(where[1])) if kind == "block" else None
            if kind == "relative" and anchor is not None:
                block = anchor + int(where[1])  # type: ignore[call-overload]
            start = None if block is None else self.block_start.get(block)
            layer = None if start is None else start + int(where[2])  # type: ignore[call-overload]
        if layer is None or not 0 <= layer < len(self.groups):
            return None
        return self.groups[layer]


@dataclass(frozen=True, slots=True)
class _Plan:
    """How a model folds for one strategy and configuration: the copies' depths, the copies, the
    group number of the model for each of a copy's groups, the periods from the shallower copy to
    the model, and the check the deeper copy's blocks get."""

    depths: tuple[int, int]
    copies: tuple[_Copy, _Copy]
    names: tuple[_Names, _Names]
    model: _Names
    steps: float
    check: FoldCheck


def fold_step(
    strategy: Strategy,
    ctx: StepContext,
    measure: Callable[[StepContext, Hashable | None, FoldCheck | None], Measured],
    *,
    peak_flops: float,
    reuse: Hashable | None = None,
) -> StepReport | None:
    """``strategy``'s step on ``ctx`` from two shallower copies (``measure`` evaluates one, checking
    its blocks when given a check), or None when folding does not apply (see the module docstring)."""
    if getattr(strategy, "layer_groups", None) is None or isinstance(ctx.config.wrap, tuple):
        return None
    plan = ctx.memo(("fold", strategy.name, ctx.config), lambda: _fold_plan(strategy, ctx) or "no fold")
    if not isinstance(plan, _Plan):
        return None
    deep = measure(_context(ctx, plan.depths[1], plan.copies[1]), _reused(reuse, plan.depths[1]), plan.check)
    if deep.slope is None:  # its blocks do not repeat: a regime that can change past the copies
        return None
    shallow = measure(_context(ctx, plan.depths[0], plan.copies[0]), _reused(reuse, plan.depths[0]), None)
    step = deep.report.step_time_s
    rise = step - shallow.report.step_time_s
    if abs(rise - deep.slope) <= SLOPE_TOLERANCE * step:
        return _extrapolate([shallow, deep], plan, ctx, peak_flops)
    # A comm stream falling behind per block, its collectives slower under compute: the periods are
    # not the step's, but the step is affine from the deeper copy on. A copy a period deeper still,
    # its blocks checked alike, must rise by as much as the deeper copy rose.
    deeper = ctx.memo(
        ("fold", strategy.name, ctx.config, 1), lambda: _fold_plan(strategy, ctx, 1) or "no fold"
    )
    if not isinstance(deeper, _Plan):
        return None
    deepest = measure(
        _context(ctx, deeper.depths[1], deeper.copies[1]), _reused(reuse, deeper.depths[1]), deeper.check
    )
    if deepest.slope is None or abs(deepest.report.step_time_s - step - rise) > SLOPE_TOLERANCE * step:
        return None
    return _extrapolate([deep, deepest], deeper, ctx, peak_flops)


def _reused(reuse: Hashable | None, depth: int) -> Hashable | None:
    return None if reuse is None else (reuse, "fold", depth)


def _fold_plan(strategy: Strategy, ctx: StepContext, further: int = 0) -> _Plan | None:
    """How ``strategy``'s step on ``ctx`` folds (``further``: from copies that many periods
    deeper), None where it does not."""
    run = identical_run(ctx.workload, ctx.caches.runs)
    dims = ctx.workload.dims
    if run is None or run[1] < MIN_RUN or (dims is not None and dims.moe is not None):
        return None  # (expert blocks are numbered in the model's dims: not renumbered in a copy)
    groups_full = strategy.layer_groups(ctx)  # type: ignore[attr-defined]
    period = None if groups_full is None else _period(groups_full, ctx.workload, run, MIN_DEPTH)
    if groups_full is None or period is None:
        return None
    length = run[1]
    # The deeper copy holds two whole periods after its first block and before its last two (and a
    # period more where the grouping spans blocks: its first groups, cut from the model's start,
    # can differ, as ZeRO-3's prefetch buckets do).
    deep = max(MIN_DEPTH + period, (2 if period == 1 else 3) * period + 3)
    deep += (length - deep) % period + further * period
    depths = (deep - period, deep)
    if 3 * sum(depths) > 2 * length:  # the copies would cost about as much as the model
        return None
    flags = _boundaries(groups_full)
    copies, names = [], []
    for n in depths:
        copy = shallower(ctx.workload, run, n, ctx.caches.copies)
        if copy is None:
            return None
        groups = strategy.layer_groups(_context(ctx, n, copy))  # type: ignore[attr-defined]
        if groups is None or _boundaries(groups) != [flags[i] for i in copy.kept]:
            return None
        copies.append(copy)
        names.append(_names(_context(ctx, n, copy), groups))
    model = _names(ctx, groups_full)
    check = (period, run[0], deep)
    return _Plan(depths, tuple(copies), tuple(names), model, (length - depths[0]) / period, check)  # type: ignore[arg-type]


def _names(ctx: StepContext, groups: Sequence[int]) -> _Names:
    """The :class:`_Names` of ``ctx``'s workload under ``groups``, once per context's caches and
    grouping (strategies that group alike, FSDP and HSDP, and every recompute setting share it)."""
    grouping = tuple(groups)
    return ctx.memo(("fold names", grouping), lambda: _Names(ctx.workload, grouping))


def _extrapolate(
    measured: Sequence[Measured], plan: _Plan, ctx: StepContext, peak_flops: float
) -> StepReport | None:
    steps = plan.steps
    reports = [m.report for m in measured]
    first = reports[0]
    same = ("strategy", "memory_capacity_bytes", "precision", "optimizer_impl", "note", "accumulation_steps")
    if any(getattr(r, name) != getattr(first, name) for r in reports[1:] for name in same):
        return None
    names = ("step_time_s", "step_time_p99_s", "compute_s", "comm_s", "comm_bytes")
    fields = _extend_maps([{name: float(getattr(r, name)) for name in names} for r in reports], steps)
    kinds = _extend_maps([m.busy.by_kind for m in measured], steps)
    links = _extend_maps([m.busy.by_link for m in measured], steps)
    peak = _peak(measured, plan)
    if fields is None or kinds is None or links is None or peak is None:
        return None
    step, compute = fields["step_time_s"], fields["compute_s"]
    if not (step > 0 and math.isfinite(step)):
        return None
    samples_per_s = first.global_batch / step
    workload, busy = ctx.workload, LinkBusy(kinds, links)
    return replace(
        first,
        step_time_s=step,
        step_time_p99_s=fields["step_time_p99_s"],
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * workload.tokens_per_sample if workload.tokens_per_sample else None,
        mfu=model_flops_per_step(workload, first.global_batch) / (ctx.gpus * peak_flops * step),
        compute_s=compute,
        exposed_comm_s=max(0.0, step - compute),
        comm_s=fields["comm_s"],
        comm_bytes=fields["comm_bytes"],
        peak_memory_bytes=peak.peak_bytes,
        peak_phase=peak.phase,
        memory_breakdown=peak.breakdown,
        fits=peak.fits,
        oom_verdict=peak.verdict(),
        memory_status=peak.status,
        link_utilisation=busy.utilisation(step),
        bottleneck_link=busy.bottleneck(),
    )


def _peak(measured: Sequence[Measured], plan: _Plan) -> MemoryPeak | None:
    """The model's memory peak: the largest extrapolated footprint of a phase both copies
    share (ties go to the phase reached first, as in the timeline), with its categories."""
    peaks = [
        {names.canonical(phase): value for phase, value in m.phase_peaks}
        for m, names in zip(measured, plan.names, strict=True)
    ]
    if len({m.fragmentation for m in measured}) != 1 or not peaks[0]:
        return None
    shared = set(peaks[0]).intersection(*peaks[1:])
    totals = {phase: _affine([p[phase][0] for p in peaks], plan.steps) for phase in shared}
    # The copies' own peaks must be shared phases, or a phase the copies do not share could win.
    own = [max(p, key=lambda phase: p[phase][0]) for p in peaks]
    if not totals or any(phase not in totals for phase in own):
        return None
    top = max(totals.values())
    tied = {
        phase: plan.model.named(phase) for phase, total in totals.items() if total >= top - 1e-12 * abs(top)
    }
    chosen = min(tied, key=lambda c: (peaks[-1][c][1], tied[c] or ""))
    parts = _extend_maps([p[chosen][2] for p in peaks], plan.steps)
    named = tied[chosen]
    if parts is None or named is None:
        return None
    first = measured[0]
    return allocator_peak(
        totals[chosen], named, parts, first.fragmentation, first.report.memory_capacity_bytes
    )


def _extend_maps(
    maps: Sequence[Mapping[str, float]], steps: float, *, shared_only: bool = False
) -> dict[str, float] | None:
    """Each key's value extrapolated; None unless every map has the same keys (with ``shared_only``,
    keys missing from one are left out)."""
    keys = set(maps[0])
    if not shared_only and any(set(m) != keys for m in maps[1:]):
        return None
    keys = keys.intersection(*maps[1:])
    return {key: _affine([m[key] for m in maps], steps) for key in sorted(keys)}
