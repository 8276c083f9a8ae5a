"""Pipeline parallelism: stages by layer, the schedules, and when each stage finishes.

**Stages.** Transformer blocks are split evenly over ``pp x vpp`` virtual stages (the first
``layers % stages`` get one block more); the embedding (and anything before the first block) sits
on the first stage, the final norm and the output head on the last, as in Megatron-LM. Virtual
stage ``c * pp + r`` is chunk ``c`` of pipeline rank ``r`` (Narayanan et al. 2021, sec. 2.2.2).

**Schedules** (per rank, the order of forward ``F``, backward ``B`` and weight-gradient ``W``
passes of each micro-batch and chunk):

- ``gpipe`` (Huang et al. 2019): all forwards, then all backwards; keeps all ``m`` micro-batches'
  activations.
- ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021, sec. 2.2.1): rank ``r`` runs ``pp - r - 1``
  warm-up forwards, then alternates one forward and one backward; it keeps at most ``pp - r``
  micro-batches in flight. With ``vpp > 1`` it is Megatron's interleaved 1F1B: warm-up
  ``2 (pp - r - 1) + (vpp - 1) pp`` chunk forwards, chunk order as
  ``megatron/core/pipeline_parallel/schedules.py`` (``get_model_chunk_id``); the first rank keeps
  ``pp + (pp - 1)/vpp`` micro-batches of activations (Korthikanti et al. 2022, sec. 4.2.3).
- ``zb-h1`` (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, ZB-H1): 1F1B
  with each backward split into ``B`` (input gradients, on the critical path) and ``W`` (weight
  gradients), a rank running a pending ``W`` whenever its next ``F``/``B`` is not ready yet, with
  1F1B's in-flight limit. The ``W`` share is the weight-gradient half of the linear layers' backward.

**Timing.** :func:`run_pipeline` list-schedules these orders: an operation starts when its rank is
free and its input has arrived (the previous virtual stage's ``F``, or the next one's ``B``, plus
the point-to-point time between the two ranks). The result is exact for the given per-stage times;
the bubble fraction is the busiest rank's idle share of the makespan.

**Blocking sends** (``ParallelOptions.p2p_blocking``, off by default): Megatron-LM of 2021
(``megatron/p2p_communication.py`` ``_communicate`` at tag v2.5, 2021-08-10, and v2.0-v2.6) posted
its sends and receives with ``torch.distributed.batch_isend_irecv``, waited on every request and then
called ``torch.cuda.synchronize()`` ("To protect against race condition when using
batch_isend_irecv()"): a rank neither computes nor enqueues its next pass until its send is done. A
pass that sends to another rank then holds that rank for the send time; without the option the send
overlaps the sender's next pass (Megatron-Core's asynchronous p2p). The wait for the receiver to post
its matching receive (NCCL's rendezvous) is not modelled.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from simcore.errors import TrainsimError
from simcore.workload.types import Workload

__all__ = [
    "PIPELINE_SCHEDULES",
    "CompiledOrders",
    "PipelineOp",
    "PipelineRun",
    "StageTimes",
    "compile_orders",
    "partition_stages",
    "rank_orders",
    "run_pipeline",
]

PIPELINE_SCHEDULES = ("1f1b", "gpipe", "zb-h1")


@dataclass(frozen=True, slots=True)
class PipelineOp:
    """One pass of one micro-batch through one chunk: kind ``F``, ``B`` or ``W``."""

    kind: str
    chunk: int
    micro: int


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Seconds of one micro-batch's passes through one chunk of one rank (``b`` includes ``w``)."""

    f: float
    b: float
    w: float = 0.0


def partition_stages(
    workload: Workload, stages: int, counts: Sequence[int] | None = None
) -> list[tuple[int, ...]]:
    """Layer indices of each of ``stages`` virtual stages (blocks split evenly, see module doc;
    ``counts``: the blocks of each stage instead, an uneven split as ``--pp-layers`` gives it)."""
    blocks = workload.block_layer_indices()
    if stages < 1 or stages > len(blocks):
        raise TrainsimError(f"cannot cut {len(blocks)} blocks into {stages} pipeline stages")
    if counts is not None and (len(counts) != stages or sum(counts) != len(blocks) or min(counts) < 1):
        raise TrainsimError(f"cannot cut {len(blocks)} blocks into stages of {list(counts)} blocks")
    base, extra = divmod(len(blocks), stages)
    out: list[list[int]] = []
    start = 0
    for stage in range(stages):
        count = counts[stage] if counts is not None else base + (1 if stage < extra else 0)
        out.append([i for block in blocks[start : start + count] for i in block])
        start += count
    first_block_layer = blocks[0][0]
    last_block_layer = blocks[-1][-1]
    before = [
        i for i in range(len(workload.layers)) if workload.layers[i].block == -1 and i < first_block_layer
    ]
    after = [
        i for i in range(len(workload.layers)) if workload.layers[i].block == -1 and i > last_block_layer
    ]
    out[0] = before + out[0]
    out[-1] = out[-1] + after
    return [tuple(stage) for stage in out]


def _interleaved_chunk(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of a rank's k-th forward or backward in Megatron's interleaved order."""
    group = k // (pp * vpp)
    chunk = (k // pp) % vpp
    return (chunk if forward else vpp - 1 - chunk), group * pp + k % pp


def rank_orders(schedule: str, pp: int, vpp: int, micro: int) -> list[list[PipelineOp]]:
    """Each rank's F/B order (``W`` passes of ``zb-h1`` are scheduled on the fly)."""
    if schedule not in PIPELINE_SCHEDULES:
        raise TrainsimError(
            f"pipeline schedule {schedule!r} unknown; allowed: {', '.join(PIPELINE_SCHEDULES)}"
        )
    if vpp > 1 and schedule != "1f1b":
        raise TrainsimError(
            f"virtual stages (vpp {vpp}) need the 1f1b schedule (interleaved), not {schedule}"
        )
    if vpp > 1 and micro % pp:
        raise TrainsimError(
            f"the interleaved schedule needs micro-batches per step ({micro}) divisible by pp ({pp}); "
            "change the global batch or the micro-batch size"
        )
    orders = []
    for rank in range(pp):
        if schedule == "gpipe":
            orders.append(
                [PipelineOp("F", 0, i) for i in range(micro)] + [PipelineOp("B", 0, i) for i in range(micro)]
            )
            continue
        total = micro * vpp
        # Megatron's warm-up: pp - r - 1 forwards; interleaved, 2 (pp - r - 1) + (vpp - 1) pp chunks
        warm = min((pp - rank - 1) * (1 if vpp == 1 else 2) + (vpp - 1) * pp, total)
        fwd = [PipelineOp("F", *_interleaved_chunk(k, pp, vpp, True)) for k in range(total)]
        bwd = [PipelineOp("B", *_interleaved_chunk(k, pp, vpp, False)) for k in range(total)]
        order = fwd[:warm]
        for k in range(total - warm):
            order += [fwd[warm + k], bwd[k]]
        order += bwd[total - warm :]
        orders.append(order)
    return orders


@dataclass(slots=True)
class PipelineRun:
    """When every pass of every rank ran, and what follows from it."""

    makespan_s: float
    # rank, op, start, end (in the order they were timed: not sorted by time)
    spans: list[tuple[int, PipelineOp, float, float]] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)
    last_backward_end_s: list[float] = field(default_factory=list)
    peak_in_flight: list[float] = field(default_factory=list)  # activation units held at most, per rank

    @property
    def bubble_fraction(self) -> float:
        """The busiest rank's idle share of the pipeline's makespan."""
        if self.makespan_s <= 0:
            return 0.0
        return max(0.0, 1.0 - max(self.busy_s) / self.makespan_s)


class _Scheduler:
    """List scheduling of the rank orders (see the module docstring)."""

    def __init__(
        self,
        orders: list[list[PipelineOp]],
        times: Sequence[Sequence[StageTimes]],
        p2p: Callable[[int, int], float],
        split_w: bool,
    ) -> None:
        self.orders, self.times, self.p2p, self.split_w = orders, times, p2p, split_w
        self.pp = len(orders)
        self.vpp = len(times[0])
        self.end: dict[tuple[int, PipelineOp], float] = {}
        self.pos = [0] * self.pp
        self.free = [0.0] * self.pp
        self.pending_w: list[deque[PipelineOp]] = [deque() for _ in range(self.pp)]
        self.waiting: dict[tuple[int, PipelineOp], list[int]] = {}
        self.run = PipelineRun(0.0, busy_s=[0.0] * self.pp, last_backward_end_s=[0.0] * self.pp)

    def _duration(self, rank: int, op: PipelineOp) -> float:
        t = self.times[rank][op.chunk]
        if op.kind == "F":
            return t.f
        if op.kind == "W":
            return t.w
        return t.b - t.w if self.split_w else t.b

    def _dependency(self, rank: int, op: PipelineOp) -> tuple[int, PipelineOp] | None:
        stage = op.chunk * self.pp + rank
        last = self.pp * self.vpp - 1
        if op.kind == "F":
            if stage == 0:
                return None
            prev = stage - 1
            return prev % self.pp, PipelineOp("F", prev // self.pp, op.micro)
        if stage == last:
            return rank, PipelineOp("F", op.chunk, op.micro)
        nxt = stage + 1
        return nxt % self.pp, PipelineOp("B", nxt // self.pp, op.micro)

    def _ready(self, rank: int, op: PipelineOp) -> float | None:
        dep = self._dependency(rank, op)
        if dep is None:
            return 0.0
        done = self.end.get(dep)
        if done is None:
            return None
        return done + (self.p2p(dep[0], rank) if dep[0] != rank else 0.0)

    def _execute(self, rank: int, op: PipelineOp, start: float, heap: list[tuple[float, int]]) -> None:
        end = start + self._duration(rank, op)
        self.end[(rank, op)] = end
        self.free[rank] = end
        self.run.spans.append((rank, op, start, end))
        self.run.busy_s[rank] += end - start
        if op.kind == "B" and self.split_w:
            self.pending_w[rank].append(PipelineOp("W", op.chunk, op.micro))
        if op.kind in ("B", "W"):
            self.run.last_backward_end_s[rank] = max(self.run.last_backward_end_s[rank], end)
        for waiter in self.waiting.pop((rank, op), []):
            heapq.heappush(heap, (self.free[waiter], waiter))
        heapq.heappush(heap, (end, rank))

    def step(self, rank: int, now: float, heap: list[tuple[float, int]]) -> None:
        order = self.orders[rank]
        if self.pos[rank] >= len(order):
            if self.pending_w[rank]:
                self._execute(rank, self.pending_w[rank].popleft(), now, heap)
            return
        op = order[self.pos[rank]]
        ready = self._ready(rank, op)
        if (ready is None or ready > now) and self.pending_w[rank]:
            self._execute(rank, self.pending_w[rank].popleft(), now, heap)
            return
        if ready is None:
            dep = self._dependency(rank, op)
            assert dep is not None  # a pass without a dependency is always ready
            self.waiting.setdefault(dep, []).append(rank)
            return
        self.pos[rank] += 1
        self._execute(rank, op, max(now, ready), heap)


@dataclass(frozen=True, slots=True)
class CompiledOrders:
    """Rank orders as flat integer records for timing them in order (:func:`run_pipeline`).

    ``ops[rank]`` holds, per pass: the pass, its slot in the table of pass end times, the slot of
    the pass it waits for (-1: none), the rank that pass ran on, its chunk and whether it is a
    forward. It depends only on the schedule's shape (``pp``, ``vpp``, micro-batches), so a sweep
    can compile it once per shape.
    """

    orders: list[list[PipelineOp]]
    ops: tuple[tuple[tuple[PipelineOp, int, int, int, int, bool], ...], ...]
    slots: int
    links: tuple[tuple[int, int], ...]  # (sender, receiver) pairs of different ranks that send


def compile_orders(orders: list[list[PipelineOp]], vpp: int) -> CompiledOrders:
    """``orders`` (of :func:`rank_orders`) with each pass's dependency resolved to a slot."""
    pp = len(orders)
    micro = 1 + max((op.micro for order in orders for op in order), default=0)
    stages = pp * vpp

    def slot(kind: str, stage: int, m: int) -> int:
        return ((kind == "B") * stages + stage) * micro + m

    ranks = []
    for rank, order in enumerate(orders):
        records = []
        for op in order:
            stage = op.chunk * pp + rank
            if op.kind == "F":
                dep = slot("F", stage - 1, op.micro) if stage else -1
                src = (stage - 1) % pp if stage else rank
            elif stage == stages - 1:
                dep, src = slot("F", stage, op.micro), rank
            else:
                dep, src = slot("B", stage + 1, op.micro), (stage + 1) % pp
            records.append((op, slot(op.kind, stage, op.micro), dep, src, op.chunk, op.kind == "F"))
        ranks.append(tuple(records))
    links = sorted({(r[3], rank) for rank, records in enumerate(ranks) for r in records if r[3] != rank})
    return CompiledOrders(orders, tuple(ranks), 2 * stages * micro, tuple(links))


def run_pipeline(
    orders: list[list[PipelineOp]] | CompiledOrders,
    times: Sequence[Sequence[StageTimes]],
    p2p: Callable[[int, int], float],
    *,
    split_w: bool = False,
    activation_weights: Sequence[Sequence[float]] | None = None,
    spans: bool = True,
    blocking_sends: bool = False,
) -> PipelineRun:
    """List-schedule ``orders`` with ``times[rank][chunk]``; ``p2p(src, dst)`` is the send time.

    ``blocking_sends`` (Megatron-LM 2021, see the module docstring): a pass that sends its output to
    another rank holds its rank for the send time before the rank's next pass (not with ``split_w``).

    ``orders`` may come compiled (:func:`compile_orders`) when a caller times one shape often.
    ``spans=False``: a caller that draws no timeline gets the run without its passes' spans.
    ``activation_weights[rank][chunk]`` weighs a chunk's in-flight activations (default 1 each):
    ``peak_in_flight`` is the most a rank holds at once in those units.
    """
    if isinstance(orders, CompiledOrders):
        compiled, plain = orders, orders.orders
    else:
        compiled, plain = compile_orders(orders, len(times[0])), orders
    link = _link_times(compiled, p2p)
    if split_w and blocking_sends:
        raise TrainsimError("blocking sends are modelled for the 1f1b and gpipe schedules, not zb-h1")
    if split_w:
        run = _split_w_schedule(compiled, times, link, spans)
    else:
        run = _in_order(compiled, times, link, spans, blocking_sends)
    run.peak_in_flight = _in_flight(plain, activation_weights)
    return run


def _link_times(compiled: CompiledOrders, p2p: Callable[[int, int], float]) -> list[list[float]]:
    """``link[receiver][sender]``: the send time of every pair of ranks that send (asked once each)."""
    pp = len(compiled.ops)
    link = [[0.0] * pp for _ in range(pp)]
    for src, dst in compiled.links:
        link[dst][src] = p2p(src, dst)
    return link


def _deadlock(done: int, orders: list[list[PipelineOp]]) -> TrainsimError:
    total = sum(len(order) for order in orders)
    return TrainsimError(f"pipeline schedule deadlocked after {done} of {total} passes")


def _list_schedule(
    orders: list[list[PipelineOp]],
    times: Sequence[Sequence[StageTimes]],
    p2p: Callable[[int, int], float],
    split_w: bool,
) -> PipelineRun:
    """Event-driven list scheduling: a rank takes a pending ``W`` when its next pass is not ready."""
    scheduler = _Scheduler(orders, times, p2p, split_w)
    heap = [(0.0, rank) for rank in range(len(orders))]
    heapq.heapify(heap)
    while heap:
        now, rank = heapq.heappop(heap)
        if now < scheduler.free[rank]:
            continue  # a stale entry: the rank was rescheduled later
        scheduler.step(rank, now, heap)
    done = sum(1 for (_, op) in scheduler.end if op.kind != "W")
    if done != sum(len(order) for order in orders):
        raise _deadlock(done, orders)
    scheduler.run.makespan_s = max(scheduler.free)
    return scheduler.run


def _in_order(
    compiled: CompiledOrders,
    times: Sequence[Sequence[StageTimes]],
    link: list[list[float]],
    record: bool = True,
    blocking_sends: bool = False,
) -> PipelineRun:
    """The same schedule when every rank runs its order as given (no ``W`` to fill gaps with).

    With ``blocking_sends`` a pass whose output goes to another rank (a forward to the next virtual
    stage, a backward to the previous one) keeps its rank until the send is done: the rank's next
    pass starts ``link`` seconds after it at the earliest (the rank is blocked, not busy).

    Then nothing depends on when a rank looks for work: each pass starts at the later of its
    rank's previous end and its input's arrival (the list scheduler's ``max(now, ready)``, the
    same floating-point operations), so the passes are timed rank by rank, each rank advancing
    until it waits on a pass not yet timed and resuming once that pass is timed.
    """
    pp = len(compiled.ops)
    stages = pp * len(times[0])
    ends = [-1.0] * compiled.slots
    waiter = [-1] * compiled.slots  # the rank stopped at a pass waiting for this slot
    pos, free = [0] * pp, [0.0] * pp
    run = PipelineRun(0.0, busy_s=[0.0] * pp, last_backward_end_s=[0.0] * pp)
    spans = run.spans
    resume = list(range(pp - 1, -1, -1))
    while resume:
        rank = resume.pop()
        ops, k, now, busy, last_b = compiled.ops[rank], pos[rank], free[rank], run.busy_s[rank], 0.0
        arrive, chunk_times = link[rank], times[rank]
        while k < len(ops):
            op, own, dep, src, chunk, forward = ops[k]
            if dep < 0:
                ready = 0.0
            else:
                ready = ends[dep]
                if ready < 0.0:
                    waiter[dep] = rank
                    break
                if src != rank:
                    ready += arrive[src]
            start = max(now, ready)
            t = chunk_times[chunk]
            now = ends[own] = start + (t.f if forward else t.b)
            if record:
                spans.append((rank, op, start, now))
            busy += now - start
            if not forward:
                last_b = now
            if blocking_sends:
                peer = chunk * pp + rank + (1 if forward else -1)
                if 0 <= peer < stages and peer % pp != rank:
                    now += link[peer % pp][rank]
            if waiter[own] >= 0:
                resume.append(waiter[own])
            k += 1
        run.busy_s[rank] = busy
        if last_b:
            run.last_backward_end_s[rank] = max(run.last_backward_end_s[rank], last_b)
        pos[rank], free[rank] = k, now
    if sum(pos) != sum(len(ops) for ops in compiled.ops):
        raise _deadlock(sum(pos), compiled.orders)
    run.makespan_s = max(free)
    return run


class _SplitW:
    """:func:`_list_schedule` with split weight gradients, on compiled orders (the same decisions
    and floating-point operations, on integer slots instead of passes as dictionary keys)."""

    def __init__(
        self, compiled: CompiledOrders, times: Sequence[Sequence[StageTimes]], link: list[list[float]]
    ) -> None:
        pp = len(compiled.ops)
        self.compiled, self.times, self.link = compiled, times, link
        self.ends = [-1.0] * compiled.slots
        self.waiting: list[list[int]] = [[] for _ in range(compiled.slots)]
        self.pos, self.free = [0] * pp, [0.0] * pp
        self.pending: list[deque[PipelineOp]] = [deque() for _ in range(pp)]
        self.run = PipelineRun(0.0, busy_s=[0.0] * pp, last_backward_end_s=[0.0] * pp)
        self.heap = [(0.0, rank) for rank in range(pp)]

    def _finish(self, rank: int, op: PipelineOp, start: float, end: float, record: bool) -> None:
        self.free[rank] = end
        if record:
            self.run.spans.append((rank, op, start, end))
        self.run.busy_s[rank] += end - start
        heapq.heappush(self.heap, (end, rank))

    def weight_pass(self, rank: int, now: float, record: bool) -> None:
        op = self.pending[rank].popleft()
        end = now + self.times[rank][op.chunk].w
        last = self.run.last_backward_end_s
        last[rank] = max(last[rank], end)
        self._finish(rank, op, now, end, record)

    def step(self, rank: int, now: float, record: bool) -> None:
        ops = self.compiled.ops[rank]
        k = self.pos[rank]
        if k >= len(ops):
            if self.pending[rank]:
                self.weight_pass(rank, now, record)
            return
        op, own, dep, src, chunk, forward = ops[k]
        ready: float | None = 0.0
        if dep >= 0:
            done = self.ends[dep]
            ready = None if done < 0.0 else done + (self.link[rank][src] if src != rank else 0.0)
        if (ready is None or ready > now) and self.pending[rank]:
            self.weight_pass(rank, now, record)
            return
        if ready is None:
            self.waiting[dep].append(rank)
            return
        self.pos[rank] = k + 1
        start = max(now, ready)
        t = self.times[rank][chunk]
        end = self.ends[own] = start + (t.f if forward else t.b - t.w)
        if not forward:
            self.pending[rank].append(PipelineOp("W", chunk, op.micro))
            last = self.run.last_backward_end_s
            last[rank] = max(last[rank], end)
        for waiter in self.waiting[own]:
            heapq.heappush(self.heap, (self.free[waiter], waiter))
        self.waiting[own] = []
        self._finish(rank, op, start, end, record)


def _split_w_schedule(
    compiled: CompiledOrders,
    times: Sequence[Sequence[StageTimes]],
    link: list[list[float]],
    record: bool = True,
) -> PipelineRun:
    """ZB-H1's list schedule (:func:`_list_schedule` with ``split_w``), timed on compiled orders."""
    scheduler = _SplitW(compiled, times, link)
    heap, free = scheduler.heap, scheduler.free
    while heap:
        now, rank = heapq.heappop(heap)
        if now < free[rank]:
            continue  # a stale entry: the rank was rescheduled later
        scheduler.step(rank, now, record)
    if sum(scheduler.pos) != sum(len(ops) for ops in compiled.ops):
        raise _deadlock(sum(scheduler.pos), compiled.orders)
    scheduler.run.makespan_s = max(free)
    return scheduler.run


def _in_flight(orders: list[list[PipelineOp]], weights: Sequence[Sequence[float]] | None) -> list[float]:
    peaks = []
    for rank, order in enumerate(orders):
        held = peak = 0.0
        rank_weights = weights[rank] if weights is not None else None
        for op in order:
            weight = rank_weights[op.chunk] if rank_weights is not None else 1.0
            if op.kind == "F":
                held += weight
                if held > peak:
                    peak = held
            else:
                held -= weight
        peaks.append(peak)
    return peaks
