"""A step as two streams of operations: the plan every strategy builds and both evaluators run.

A :class:`StepPlan` is what a strategy produces: ordered operations on named streams, each
waiting for other operations to end (``after``) or to start (``after_start``, how a prefetch is
issued when an earlier unit's forward begins). A stream runs its operations in order, like a CUDA
stream: one blocked operation holds back the ones queued behind it.

Stream names: ``compute`` and ``comm`` are the representative rank's; ``"<rank>/compute"``,
``"<rank>/comm"`` (any prefix, e.g. ``"rank3"`` or ``"server0"``) are the streams of another
process, for the per-rank plans of stragglers and parameter servers. A stream whose
last name part is ``comm`` communicates; every other stream computes.

Keys and labels: every operation carries an :class:`OpKey` (its group, micro-batch, block and
stage as numbers), which is what the fast path aligns plans on (:mod:`simcore.fastpath.fold`
matches a deeper model's operations with a copy's, :mod:`simcore.fastpath.step` a probe's
micro-batches with the step's). Its display name is rendered from a :class:`Label` and the key
(:func:`render_label`: ``all_gather unit 3 (forward prefetch) [micro-batch 2]``) and is never read
back: how groups and micro-batches are written (:func:`group_label`, :func:`micro_batch_label`) can
change without changing any result. Memory phases are kept as structure too (:data:`Phase`: the
compute running and the collective that changed memory), beside their text.

How a plan runs, contention included, is the evaluators' business: :mod:`simcore.step.des` (SimPy
processes) and :mod:`simcore.step.eventfree` (a list scheduler, the same result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from simcore.compute.memory import MemoryChange, MemoryTimeline

__all__ = [
    "NO_KEY",
    "START_OF_STEP",
    "Label",
    "Op",
    "OpKey",
    "Phase",
    "PhasePart",
    "PlanBuilder",
    "PlanRun",
    "RepeatSpan",
    "Span",
    "StepPlan",
    "group_label",
    "is_comm_stream",
    "micro_batch_label",
    "new_span",
    "phase_label",
    "phase_of",
    "phase_text",
    "rank_of_stream",
    "render_label",
]

COMPUTE = "compute"
COMM = "comm"
START_OF_STEP = "start of step"  # the memory phase before any operation runs


def is_comm_stream(stream: str) -> bool:
    """Whether ``stream`` carries communication (its last ``/`` part is ``comm``)."""
    return stream.rsplit("/", 1)[-1] == COMM


def rank_of_stream(stream: str) -> str:
    """The process a stream belongs to: its prefix before the last ``/`` ("" = representative rank)."""
    return stream.rsplit("/", 1)[0] if "/" in stream else ""


@dataclass(frozen=True, slots=True)
class OpKey:
    """Which part of the step an operation belongs to, as numbers (None where it does not apply).

    ``group``: the strategy group the operation moves or copies, the one its label names (an FSDP
    unit, a ZeRO-3 prefetch bucket, a DDP/ZeRO gradient bucket); ``micro_batch``: the micro-batch
    its label names (1-based; None in a step of one micro-batch, whose labels name none);
    ``block``: the model block a forward, backward or recompute computes; ``stage``: the pipeline
    stage. What a plan is compared and extrapolated on (:mod:`simcore.fastpath`): labels are for
    people and are rendered from these, never read back.
    """

    group: int | None = None
    micro_batch: int | None = None
    block: int | None = None
    stage: int | None = None


NO_KEY = OpKey()


class Label(NamedTuple):
    """An operation's label around its numbers: ``head``, then the group (named ``word``, none if
    empty), then ``tail``, then the micro-batch, each number taken from the operation's key."""

    head: str
    word: str = ""
    tail: str = ""


def group_label(word: str, group: int) -> str:
    """How a label names a group: ``unit 3``, ``bucket 0``."""
    return f"{word} {group}"


def micro_batch_label(micro_batch: int | None) -> str:
    """The end of a label naming its micro-batch (`` [micro-batch 2]``; nothing for None)."""
    return "" if micro_batch is None else f" [micro-batch {micro_batch}]"


def render_label(label: Label, key: OpKey) -> str:
    """The display name of an operation labelled ``label`` with ``key``'s numbers."""
    head, word, tail = label
    if word:
        if key.group is None:
            raise ValueError(f"label {head!r} names a {word} but its key has no group")
        head += group_label(word, key.group)
    micro = key.micro_batch
    return head + tail if micro is None else head + tail + micro_batch_label(micro)


def _render(label: Label, key: OpKey) -> str:
    """:func:`render_label`, without the call where there is no number to write (most operations
    of a step of one micro-batch)."""
    if label.word or key.micro_batch is not None:
        return render_label(label, key)
    return label.head + label.tail


def phase_label(compute: str, comm: str | None) -> str:
    """The memory phase of a change: the compute running, and the collective that made it, if one did
    (memory changed by a collective is attributed to the compute running at that moment)."""
    return compute if comm is None else f"{compute} ({comm})"


@dataclass(frozen=True, slots=True)
class Op:
    """One operation: compute work at full speed (seconds) or one collective (its time).

    ``key`` says which group, micro-batch and block it belongs to; ``label``, when given, is what
    ``name`` was rendered from (:func:`render_label`), so that its name for other numbers (a deeper
    model's group, a longer step's micro-batch) can be rendered too.
    """

    id: int
    stream: str
    name: str
    duration_s: float
    kind: str = ""
    after: tuple[int, ...] = ()
    after_start: tuple[int, ...] = ()
    on_start: tuple[MemoryChange, ...] = ()
    on_end: tuple[MemoryChange, ...] = ()
    bytes: float = 0.0
    # Changes applied just after on_end, as a moment of their own: temporaries released once the
    # operation's results exist (on_end then shows both alive together, as they briefly are).
    after_end: tuple[MemoryChange, ...] = ()
    link: str = ""
    link_kind: str = ""
    # per-collective contention: compute runs this many times slower while the collective runs
    contention: float = 1.0
    key: OpKey = NO_KEY
    label: Label | None = None


# Each Op slot's setter, in field order. A frozen dataclass's __init__ stores every field through
# object.__setattr__, which costs twice as much as filling the slot itself, and a sweep builds
# millions of operations: the builder fills a new Op's slots directly (_new_op), and the Op is as
# frozen afterwards as one its __init__ made.
(
    _set_id, _set_stream, _set_name, _set_duration, _set_kind, _set_after, _set_after_start,
    _set_on_start, _set_on_end, _set_bytes, _set_after_end, _set_link, _set_link_kind,
    _set_contention, _set_key, _set_label,
) = (getattr(Op, name).__set__ for name in Op.__slots__)  # fmt: skip
_allocate = object.__new__


def _new_op(
    op_id: int, stream: str, name: str, duration_s: float, kind: str, after: tuple[int, ...],
    after_start: tuple[int, ...], on_start: tuple[MemoryChange, ...], on_end: tuple[MemoryChange, ...],
    size_bytes: float, after_end: tuple[MemoryChange, ...], link: str, link_kind: str,
    contention: float, key: OpKey, label: Label | None,
) -> Op:  # fmt: skip
    """``Op(...)`` of these fields in their order, the same object at half the cost (see above)."""
    op = _allocate(Op)
    _set_id(op, op_id)
    _set_stream(op, stream)
    _set_name(op, name)
    _set_duration(op, duration_s)
    _set_kind(op, kind)
    _set_after(op, after)
    _set_after_start(op, after_start)
    _set_on_start(op, on_start)
    _set_on_end(op, on_end)
    _set_bytes(op, size_bytes)
    _set_after_end(op, after_end)
    _set_link(op, link)
    _set_link_kind(op, link_kind)
    _set_contention(op, contention)
    _set_key(op, key)
    _set_label(op, label)
    return op


# One operation of a memory phase: its label (or its name, if unlabelled) and its key.
PhasePart = tuple[Label | str, OpKey]
# A memory phase as structure: the compute running (None before any began) and the collective that
# made the change (None if the compute did).
Phase = tuple[PhasePart | None, PhasePart | None]


def phase_of(ops: tuple[Op | None, Op | None] | None) -> Phase:
    """The phase of a memory change made with ``ops`` running (the compute, the collective); None
    or ``(None, None)``: at the start of the step."""
    if ops is None:
        return (None, None)
    compute, comm = ops
    return (
        None if compute is None else (compute.name if compute.label is None else compute.label, compute.key),
        None if comm is None else (comm.name if comm.label is None else comm.label, comm.key),
    )


def _text(part: PhasePart) -> str:
    label, key = part
    return label if isinstance(label, str) else render_label(label, key)


def phase_text(phase: Phase) -> str:
    """How a phase is named in reports: the same text the plan's runs give it."""
    compute, comm = phase
    return phase_label(
        START_OF_STEP if compute is None else _text(compute), None if comm is None else _text(comm)
    )


@dataclass(slots=True)
class StepPlan:
    """A strategy's step: operations per stream, the memory held at step start, and a name."""

    strategy: str
    ops: list[Op] = field(default_factory=list)
    initial_memory: dict[str, float] = field(default_factory=dict)
    fragmentation: float = 0.0  # the caching allocator's reserved / allocated - 1, charged at the peak

    def stream_names(self) -> list[str]:
        names: list[str] = []
        for op in self.ops:
            if op.stream not in names:
                names.append(op.stream)
        return names

    def compute_s(self) -> float:
        """Compute-only time: the sum of compute work, as if nothing slowed or waited for it."""
        return sum(op.duration_s for op in self.ops if op.stream == COMPUTE)

    def comm_bytes(self) -> float:
        """Bytes of the collectives the representative rank takes part in (nccl-tests sizes)."""
        return sum(op.bytes for op in self.ops if op.stream == COMM)


class PlanBuilder:
    """Appends operations to a plan and hands back their ids for later dependencies."""

    def __init__(self, strategy: str) -> None:
        self.plan = StepPlan(strategy)
        self.last_comm: int | None = None
        # Keys and labels handed out, for the many operations that share one (cheaper than new ones).
        self._keys: dict[tuple[int | None, ...], OpKey] = {}
        self._labels: dict[tuple[str, str, str], Label] = {}

    def key(
        self,
        *,
        group: int | None = None,
        micro_batch: int | None = None,
        block: int | None = None,
        stage: int | None = None,
    ) -> OpKey:
        """The :class:`OpKey` with these numbers (one object per distinct key in a plan)."""
        fields = (group, micro_batch, block, stage)
        known = self._keys.get(fields)
        if known is None:
            known = self._keys[fields] = OpKey(group, micro_batch, block, stage)
        return known

    def label(self, head: str, word: str = "", tail: str = "") -> Label:
        """The :class:`Label` with these parts (one object per distinct label in a plan)."""
        parts = (head, word, tail)
        known = self._labels.get(parts)
        if known is None:
            known = self._labels[parts] = Label(head, word, tail)
        return known

    def add(self, stream: str, name: str | Label, duration_s: float, **kwargs: object) -> int:
        """Append an operation to any stream (see the module docstring for stream names)."""
        op_id = len(self.plan.ops)
        if isinstance(name, Label):
            kwargs["label"] = name
            name = render_label(name, kwargs.get("key", NO_KEY))  # type: ignore[arg-type]
        self.plan.ops.append(Op(op_id, stream, name, float(duration_s), **kwargs))  # type: ignore[arg-type]
        return op_id

    def compute(
        self,
        name: str | Label,
        duration_s: float,
        *,
        key: OpKey = NO_KEY,
        kind: str = "",
        after: Sequence[int] = (),
        on_start: Sequence[MemoryChange] = (),
        on_end: Sequence[MemoryChange] = (),
        after_end: Sequence[MemoryChange] = (),
    ) -> int:
        # Op built here directly (not through add's keywords): plans hold thousands of operations.
        ops = self.plan.ops
        op_id = len(ops)
        label, text = (name, _render(name, key)) if isinstance(name, Label) else (None, name)
        ops.append(
            _new_op(op_id, COMPUTE, text, float(duration_s), kind, tuple(after), (), tuple(on_start),
               tuple(on_end), 0.0, tuple(after_end), "", "", 1.0, key, label)
        )  # fmt: skip
        return op_id

    def comm(
        self,
        name: str | Label,
        duration_s: float,
        *,
        kind: str,
        key: OpKey = NO_KEY,
        size_bytes: float,
        link: str = "",
        link_kind: str = "",
        after: Sequence[int] = (),
        after_start: Sequence[int] = (),
        on_start: Sequence[MemoryChange] = (),
        on_end: Sequence[MemoryChange] = (),
        contention: float = 1.0,
    ) -> int:
        ops = self.plan.ops
        self.last_comm = op_id = len(ops)
        label, text = (name, _render(name, key)) if isinstance(name, Label) else (None, name)
        ops.append(
            _new_op(op_id, COMM, text, float(duration_s), kind, tuple(after), tuple(after_start), tuple(on_start),
               tuple(on_end), float(size_bytes), (), link, link_kind, float(contention), key, label)
        )  # fmt: skip
        return op_id

    def repeat(self, span: RepeatSpan, previous: int | None) -> RepeatSpan | None:
        """Append a copy of the operations ``span`` added, as the next micro-batch's (the structure
        of a micro-batch built once, its copies made without the strategy's hooks): ids shifted,
        dependencies inside the span shifted with them, a dependency on ``span.previous`` (the
        operation the span's micro-batch followed) turned into one on ``previous``, and keys that
        name ``span.micro_batch`` naming the next one (names rendered from their labels again).

        A caller repeats a span only where building the next micro-batch would run the same code
        on the same state (its hooks made with the same settings, none shared between micro-batches),
        so the copy is the plan that building would give. None, with nothing appended, where a
        span is not self-contained: an operation depends on one before it other than
        ``span.previous``, names another micro-batch, or has a name not rendered from a label."""
        ops = self.plan.ops
        start, end, old = span.start, span.end, span.micro_batch
        if old is None or not 0 <= start < end <= len(ops) or span.previous is None or previous is None:
            return None
        if span.last is not None and not start <= span.last < end:
            return None
        for op in ops[start:end]:
            micro = op.key.micro_batch
            if op.label is None or (micro is not None and micro != old):
                return None
            for dep in (*op.after, *op.after_start):
                if dep < start and dep != span.previous:
                    return None
        shift, new = len(ops) - start, old + 1
        suffix = micro_batch_label(new)
        # each old key's copy, by identity (the builder hands out one object per key, shared by many
        # operations; the keys live in the plan meanwhile)
        renamed: dict[int, OpKey] = {}

        def moved(deps: tuple[int, ...]) -> tuple[int, ...]:
            if not deps:
                return deps
            if len(deps) == 1:  # most operations wait for one
                d = deps[0]
                return (previous if d < start else d + shift,)
            return tuple(previous if d < start else d + shift for d in deps)  # (d < start: span.previous)

        last_comm = self.last_comm
        for op in ops[start:end]:
            key, name = op.key, op.name
            if key.micro_batch is not None:
                new_key = renamed.get(id(key))
                if new_key is None:
                    new_key = renamed[id(key)] = self.key(
                        group=key.group, micro_batch=new, block=key.block, stage=key.stage
                    )
                key = new_key
                # render_label(op.label, key), its micro-batch part written once for the span
                label: Label = op.label  # type: ignore[assignment]  # (checked above: every op has one)
                head, word, tail = label
                if word:
                    head += group_label(word, key.group)  # type: ignore[arg-type]
                name = head + tail + suffix
            # (an operation whose key names no micro-batch keeps its name: rendered from the same key)
            ops.append(
                _new_op(op.id + shift, op.stream, name, op.duration_s, op.kind,
                   moved(op.after), moved(op.after_start), op.on_start, op.on_end, op.bytes, op.after_end,
                   op.link, op.link_kind, op.contention, key, op.label)
            )  # fmt: skip
            if op.stream == COMM:
                last_comm = op.id + shift
        self.last_comm = last_comm
        last = None if span.last is None else span.last + shift
        return RepeatSpan(start + shift, end + shift, previous, last, new)


@dataclass(frozen=True, slots=True)
class RepeatSpan:
    """The operations ``[start, end)`` one micro-batch added to a plan: the micro-batch numbered
    ``micro_batch`` in keys, built after operation ``previous`` and ending with ``last`` (what the
    next micro-batch follows); see :meth:`PlanBuilder.repeat`."""

    start: int
    end: int
    previous: int | None
    last: int | None
    micro_batch: int | None


@dataclass(frozen=True, slots=True)
class Span:
    """When one operation ran (for traces and utilisation)."""

    stream: str
    name: str
    kind: str
    start_s: float
    end_s: float
    bytes: float = 0.0
    link_kind: str = ""


(_set_span_stream, _set_span_name, _set_span_kind, _set_span_start, _set_span_end, _set_span_bytes,
 _set_span_link_kind) = (getattr(Span, name).__set__ for name in Span.__slots__)  # fmt: skip


def new_span(
    stream: str, name: str, kind: str, start_s: float, end_s: float, size_bytes: float, link_kind: str
) -> Span:
    """``Span(...)`` of all its fields in order, the same frozen object at half the cost (filled
    as the builder fills an :class:`Op`: every evaluated plan records a span per operation)."""
    span = _allocate(Span)
    _set_span_stream(span, stream)
    _set_span_name(span, name)
    _set_span_kind(span, kind)
    _set_span_start(span, start_s)
    _set_span_end(span, end_s)
    _set_span_bytes(span, size_bytes)
    _set_span_link_kind(span, link_kind)
    return span


@dataclass(slots=True)
class PlanRun:
    """The result of running a plan once: its duration, spans and memory timeline."""

    step_time_s: float
    spans: list[Span]
    memory: MemoryTimeline
