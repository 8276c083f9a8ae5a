"""What the planner searches: candidate layouts, GPU counts and the global batch.

A :class:`PlanLayout` is one way to run a training step on a given number of GPUs: the
data-parallel strategy, the micro-batch, the model-parallel degrees
(:class:`~simcore.parallel.layout.ParallelLayout`: tensor, pipeline with virtual stages, context,
expert) and how the layout runs (:class:`~simcore.parallel.options.ParallelOptions`: pipeline
schedule, sequence parallelism, recompute, offload). :func:`search_axes` resolves the degrees a
:class:`SearchSpace` allows on a cluster and model; :func:`layouts_for` lists every candidate at
one GPU count that divides evenly.

Rules the search applies before timing (each a stated dominance or a divisibility, not a guess):

- **Degrees**: tensor, context, expert and virtual-pipeline degrees are powers of two (heads,
  widths, sequence lengths and expert counts of the presets are, and GPU counts of whole nodes
  are); the pipeline degree divides the number of blocks (balanced stages: an uneven split makes
  the largest stage gate every pass).
- **Sequence parallelism** is on wherever tensor parallelism is, unless asked otherwise: it replaces
  each tensor-parallel all-reduce by a reduce-scatter and an all-gather of the same volume and
  divides the activations the all-reduce left whole by ``tp`` (Korthikanti et al. 2022, sec. 4.2.2),
  so it never needs more communication or memory. Expert with tensor parallelism needs it
  (Megatron-Core), so there it is always on.
- **GPipe** is searched only when asked (``--schedules``): it has the bubble of non-interleaved
  1F1B, ``(p-1)/(m+p-1)``, and keeps all ``m`` micro-batches in flight where 1F1B keeps at most
  ``p`` (Narayanan et al. 2021, sec. 2.2.1), so it never beats 1F1B on time or memory.
- **Offload** is the last memory lever (:func:`simcore.planner.search.prepare`): it is tried only
  for a layout whose memory floor without offload is above the usable memory (moving state over
  PCIe and updating on the host never shortens a step, it only frees device memory), and only
  when that layout with full recompute does not fit either (full recompute costs at most one more
  forward, about a third of the step's compute, Chen et al. 2016; offload moves state over PCIe,
  two orders of magnitude below HBM bandwidth, and updates on the host's slower memory).
- **Pipelines run with DDP or ZeRO-1** (``pp > 1``): the frameworks that pipeline do not shard
  gradients or parameters across a pipeline's micro-batches (DeepSpeed: "ZeRO-2 and ZeRO-3 are
  incompatible with pipeline parallelism", ``deepspeed/runtime/pipe/engine.py``; Megatron-Core's
  distributed optimizer is ZeRO-1), and sharded strategies would gather or reduce every
  micro-batch. ZeRO-2/3, FSDP and HSDP are searched with tensor, context and expert parallelism
  (``--pipeline-strategies`` widens the rule; the step model runs every strategy with pipelines).
- The schedule and virtual stages only where there is a pipeline (``pp > 1``); interleaving
  (``vpp > 1``) only with 1F1B and with micro-batches per step divisible by ``pp``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from simcore.errors import TrainsimError
from simcore.parallel.layout import LayoutError, ParallelLayout, check_layout
from simcore.parallel.options import OFFLOAD_MODES, ParallelOptions, parse_recompute
from simcore.parallel.pp import PIPELINE_SCHEDULES
from simcore.strategies import strategy_names
from simcore.workload.types import Workload

__all__ = [
    "AXES",
    "DEFAULT_GLOBAL_BATCH",
    "DEFAULT_MAX_MICRO_BATCH",
    "DEFAULT_MAX_PP",
    "DEFAULT_MAX_VPP",
    "DEFAULT_MICRO_BATCH_TOKENS",
    "DEFAULT_TOKENS_PER_STEP",
    "LONG_SEQUENCE",
    "MAX_GPUS",
    "PIPELINE_STRATEGIES",
    "PlanLayout",
    "SearchAxes",
    "SearchSpace",
    "data_parallel_axes",
    "describe_axes",
    "layouts_for",
    "max_micro_batch",
    "parse_gpu_counts",
    "resolve_global_batch",
    "search_axes",
]

# Language models: 4M tokens per optimizer step, Llama 2's global batch (Touvron et al., "Llama 2:
# Open Foundation and Fine-Tuned Chat Models", 2023, section 2.2: "a global batch-size of 4M tokens").
DEFAULT_TOKENS_PER_STEP = 4 * 2**20
# Vision models: 1024 images per step (our default: the ResNet-50 batch at which Goyal et al., "Accurate,
# Large Minibatch SGD", 2017, report no loss of accuracy with the linear scaling rule).
DEFAULT_GLOBAL_BATCH = 1024
DEFAULT_MAX_MICRO_BATCH = 32
# Language models: the default largest micro-batch holds this many tokens (a GEMM's token dimension
# of 16k already fills a GPU: cuBLAS tiles are 128-256 rows; Megatron's 4k-sequence recipes use
# micro-batches of 1-2 sequences). --max-micro-batch overrides it.
DEFAULT_MICRO_BATCH_TOKENS = 16 * 1024
MAX_GPUS = 1 << 20
# GPU counts one plan may search: each is a full layout search (seconds to minutes), and a plan of
# 64 counts already covers every power of two and step a study needs; "1:65536:1" is refused
# from its end points, before anything is listed.
MAX_GPU_COUNTS = 64
MAX_MICRO_BATCH = 1 << 16  # samples: far above any GPU's memory, and it bounds the divisor search
# Pipeline depth cap: Narayanan et al. 2021 (Table 1) train up to 1T parameters with pp <= 64, but
# their GPT-3 175B and smaller runs use pp <= 16; deeper pipelines only add bubble at these sizes.
DEFAULT_MAX_PP = 16
# Virtual stages per pipeline rank: Megatron's published interleaved runs use 2 to 4 chunks
# (Narayanan et al. 2021, sec. 5.4.1, Figure 13).
DEFAULT_MAX_VPP = 4
# Context parallelism is searched by default from this sequence length on (below it the attention
# activations of one sequence fit a tensor-parallel group; Megatron-Core's long-context recipes
# start context parallelism at 16k-32k tokens).
LONG_SEQUENCE = 16 * 1024
DEFAULT_MAX_CP = 8
DEFAULT_RECOMPUTE = ("none", "selective", "full")
DEFAULT_SCHEDULES = ("1f1b", "zb-h1")  # gpipe only when asked: see the module docstring
AXES = ("tp", "pp", "cp", "ep", "vpp")
PIPELINE_STRATEGIES = ("ddp", "zero1")  # with pp > 1: see the module docstring
_RANGE = re.compile(r"^(\d+)\s*(?:\.\.|:)\s*(\d+)(?:\s*:\s*(x?)(\d+))?$")
_DEFAULT_OPTIONS = ParallelOptions()


@dataclass(frozen=True, slots=True)
class PlanLayout:
    """One candidate: the data-parallel strategy, the micro-batch, the model-parallel degrees and
    how the layout runs (schedule, sequence parallelism, recompute, offload)."""

    strategy: str
    micro_batch: int
    parallel: ParallelLayout = field(default_factory=ParallelLayout)
    options: ParallelOptions = field(default_factory=ParallelOptions)

    @property
    def recompute(self) -> str:
        """The recompute mode (``none``, ``selective``, ``full``, ``every-K``)."""
        return self.options.recompute

    @property
    def pure_data_parallel(self) -> bool:
        """Every model-parallel degree 1 (recompute or offload may still be on)."""
        return self.parallel.is_trivial

    @property
    def fast_path(self) -> bool:
        """Pure data parallelism with no recompute or full recompute and no offload: the step the
        what-if's data-parallel path runs (and the fast path times)."""
        return (
            self.pure_data_parallel and self.recompute in ("none", "full") and self.options.offload == "none"
        )

    def label(self, gpus: int) -> str:
        """The what-if's name (:func:`simcore.whatif.layouts.point_label`: ``"zero1 dp32 tp8 pp4 vpp2"``,
        just the strategy for pure data parallelism), the micro-batch, and each option not at its
        default (``recompute=``, ``offload=``, ``schedule=``; ``sp`` for sequence parallelism)."""
        parts = [self.strategy]
        if not self.pure_data_parallel:
            parts.append(self.parallel.label(gpus))
        parts.append(f"mb={self.micro_batch}")
        opts = self.options
        if opts.recompute != "none":
            parts.append(f"recompute={opts.recompute}")
        if opts.offload != "none":
            parts.append(f"offload={opts.offload}")
        if opts.schedule != _DEFAULT_OPTIONS.schedule:
            parts.append(f"schedule={opts.schedule}")
        if opts.sequence_parallel and self.parallel.tp > 1:
            parts.append("sp")
        if opts.tp_comm_overlap and self.parallel.tp > 1:
            parts.append("tp-overlap")
        return " ".join(parts)

    def to_record(self, gpus: int) -> dict[str, object]:
        """The label and every degree and option, for JSON and CSV."""
        lay, opts = self.parallel, self.options
        return {
            "label": self.label(gpus),
            "strategy": self.strategy,
            "micro_batch": self.micro_batch,
            "dp": lay.dp(gpus),
            "tp": lay.tp,
            "pp": lay.pp,
            "cp": lay.cp,
            "ep": lay.ep,
            "vpp": lay.vpp,
            "schedule": opts.schedule,
            "sequence_parallel": opts.sequence_parallel and lay.tp > 1,
            "tp_comm_overlap": opts.tp_comm_overlap and lay.tp > 1,
            "recompute": opts.recompute,
            "offload": opts.offload,
        }

    def sort_key(self) -> tuple[object, ...]:
        """Groups like candidates (the chunks a worker gets share a cluster and a micro-batch)."""
        lay, opts = self.parallel, self.options
        return (self.micro_batch, lay.tp, lay.pp, lay.cp, lay.ep, lay.vpp, opts.schedule,
                opts.sequence_parallel, opts.recompute, opts.offload, self.strategy)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The axes searched at every GPU count.

    ``micro_batches`` None: every divisor of the per-replica batch up to ``max_micro_batch`` (None:
    :data:`DEFAULT_MAX_MICRO_BATCH` samples, at most :data:`DEFAULT_MICRO_BATCH_TOKENS` tokens).
    ``recompute``, ``offload``, ``schedules``: the modes tried. ``sequence_parallel``: the settings
    tried where ``tp > 1``. ``max_tp`` ... ``max_vpp`` bound the degrees (None: the default from
    the cluster and model, :func:`search_axes`); ``tp`` ... ``vpp`` (None: every allowed degree)
    fix an axis to the degrees listed. ``pipeline_strategies``: the strategies searched with
    ``pp > 1`` (see the module docstring).
    """

    strategies: tuple[str, ...] = tuple(strategy_names())
    micro_batches: tuple[int, ...] | None = None
    max_micro_batch: int | None = None
    recompute: tuple[str, ...] = DEFAULT_RECOMPUTE
    offload: tuple[str, ...] = OFFLOAD_MODES
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    sequence_parallel: tuple[bool, ...] = (True,)
    tp_comm_overlap: bool = False  # --tp-comm-overlap where sequence parallelism runs
    ring_kv: str = "grouped"  # --ring-kv: the key/value heads ring attention moves (simcore.parallel.cp)
    ring_merge: str = "fused"  # --ring-merge: ring attention's per-step merge kernels (simcore.parallel.cp)
    pipeline_strategies: tuple[str, ...] = PIPELINE_STRATEGIES
    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    max_vpp: int = DEFAULT_MAX_VPP
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        known = strategy_names()
        for name in (*self.strategies, *self.pipeline_strategies):
            if name not in known:
                raise TrainsimError(
                    f"the planner searches synchronous strategies only; {name!r} is not one of {', '.join(known)}"
                )
        if not self.strategies:
            raise TrainsimError("the search space has no strategy; give at least one of " + ", ".join(known))
        if self.micro_batches is not None and (not self.micro_batches or min(self.micro_batches) < 1):
            raise TrainsimError(f"micro-batch sizes must be positive, got {list(self.micro_batches or ())}")
        if self.max_micro_batch is not None and not 1 <= self.max_micro_batch <= MAX_MICRO_BATCH:
            raise TrainsimError(
                f"--max-micro-batch must be between 1 and {MAX_MICRO_BATCH}, got {self.max_micro_batch}"
            )
        self._check_modes()
        for axis in AXES:
            self._check_axis(axis)

    def _check_modes(self) -> None:
        if not self.recompute:
            raise TrainsimError(
                "the search space needs at least one recompute mode (none, selective, full, every-K)"
            )
        for mode in self.recompute:
            parse_recompute(mode)
        for name, given, allowed in (("offload", self.offload, OFFLOAD_MODES),
                                     ("schedules", self.schedules, PIPELINE_SCHEDULES)):  # fmt: skip
            if not given:
                raise TrainsimError(f"--{name} lists nothing; allowed: {', '.join(allowed)}")
            bad = [g for g in given if g not in allowed]
            if bad:
                raise TrainsimError(f"--{name}: {bad[0]!r} is not known; allowed: {', '.join(allowed)}")
        if not self.sequence_parallel:
            raise TrainsimError("--sequence-parallel needs at least one setting (on or off)")

    def _check_axis(self, axis: str) -> None:
        cap = getattr(self, f"max_{axis}")
        fixed = getattr(self, axis)
        if cap is not None and (isinstance(cap, bool) or cap < 1):
            raise TrainsimError(f"--max-{axis} must be at least 1, got {cap}")
        if fixed is None:
            return
        if not fixed or min(fixed) < 1:
            raise TrainsimError(f"--{axis} degrees must be positive whole numbers, got {list(fixed)}")
        if cap is not None and max(fixed) > cap:
            raise TrainsimError(
                f"--{axis} {max(fixed)} contradicts --max-{axis} {cap}; raise --max-{axis} or give smaller degrees"
            )


@dataclass(frozen=True, slots=True)
class SearchAxes:
    """The degrees searched on one cluster for one model (see :func:`search_axes`)."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    vpp: tuple[int, ...]
    blocks: int


def data_parallel_axes(workload: Workload) -> SearchAxes:
    """Every model-parallel degree 1: the data-parallel planner's space."""
    return SearchAxes((1,), (1,), (1,), (1,), (1,), len(workload.block_names))


def _powers_of_two(cap: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(cap.bit_length()) if 1 << k <= cap)


def search_axes(space: SearchSpace, workload: Workload, node_size: int) -> SearchAxes:
    """The degrees of each axis: the given ones (each checked against the model: an error names
    the rule it breaks), or every allowed one up to the cap.

    Default caps: TP up to the GPUs per node (a TP group on NVLink), PP up to the blocks and
    :data:`DEFAULT_MAX_PP`, CP 1 below :data:`LONG_SEQUENCE` tokens (else up to
    :data:`DEFAULT_MAX_CP`), EP up to the experts of a mixture-of-experts model (1 otherwise),
    VPP up to :data:`DEFAULT_MAX_VPP`.
    """
    dims = workload.dims
    blocks = len(workload.block_names)
    if dims is None:
        fixed = [a for a in AXES if any(d > 1 for d in (getattr(space, a) or ()))]
        if fixed:
            raise TrainsimError(
                f"--{fixed[0]}: model {workload.name!r} has no transformer shape; only data parallelism "
                "applies (model-parallel degrees need a transformer preset or shape file)"
            )
        return SearchAxes((1,), (1,), (1,), (1,), (1,), blocks)
    experts = dims.moe.experts if dims.moe is not None else 1
    caps = {
        "tp": space.max_tp if space.max_tp is not None else node_size,
        "pp": space.max_pp if space.max_pp is not None else min(blocks, DEFAULT_MAX_PP),
        "cp": space.max_cp if space.max_cp is not None else (DEFAULT_MAX_CP if dims.seq_len >= LONG_SEQUENCE else 1),
        "ep": space.max_ep if space.max_ep is not None else experts,
        "vpp": space.max_vpp,
    }  # fmt: skip
    degrees = {axis: _axis_degrees(space, axis, caps[axis], workload, blocks) for axis in AXES}
    if max(degrees["pp"]) == 1:  # virtual stages need a pipeline
        if space.vpp is not None and max(space.vpp) > 1:
            raise TrainsimError(
                f"--vpp {max(space.vpp)} needs pipeline parallelism; allow pp > 1 (--max-pp, --pp)"
            )
        degrees["vpp"] = (1,)
    return SearchAxes(degrees["tp"], degrees["pp"], degrees["cp"], degrees["ep"], degrees["vpp"], blocks)


def _axis_degrees(
    space: SearchSpace, axis: str, cap: int, workload: Workload, blocks: int
) -> tuple[int, ...]:
    fixed: tuple[int, ...] | None = getattr(space, axis)
    if fixed is not None:
        for degree in fixed:
            reason = _model_rule(axis, degree, workload, blocks)
            if reason:
                raise TrainsimError(f"--{axis} {degree}: {reason}")
        return tuple(sorted(set(fixed)))
    candidates = range(1, min(cap, blocks) + 1) if axis == "pp" else _powers_of_two(cap)
    return tuple(d for d in candidates if not _model_rule(axis, d, workload, blocks))


def _model_rule(axis: str, degree: int, workload: Workload, blocks: int) -> str:
    """Why ``degree`` on ``axis`` cannot run this model on any GPU count ("" when it can)."""
    if degree == 1:
        return ""
    if axis == "pp":
        if blocks % degree:
            return f"the model's {blocks} blocks do not divide into {degree} equal pipeline stages"
        return ""
    if axis == "vpp":
        return ""  # checked with each pipeline degree (layers divisible by pp x vpp)
    probe = ParallelLayout(**{axis: degree})  # type: ignore[arg-type]  # axis is a degree field (int)
    gpus = probe.model_parallel * probe.ep  # enough data-parallel ranks for the expert group
    try:
        check_layout(probe, gpus, workload)
    except LayoutError as exc:
        return str(exc)
    return ""


def parse_gpu_counts(text: str) -> tuple[int, ...]:
    """GPU counts from ``"64,128,256"``, ``"64..1024"`` (doubling), ``"64:1024:x2"`` (times 2) or
    ``"64:1024:64"`` (steps of 64); parts may be mixed (``"8,16,64..256"``). Sorted, no repeats."""
    counts: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.isdigit():
            counts.add(int(part))
            continue
        match = _RANGE.match(part)
        if not match:
            raise TrainsimError(
                f"--gpus: {part!r} is not understood; use counts (64,128), a doubling range (64..1024), "
                "a geometric range (64:1024:x2) or a stepped one (64:1024:64)"
            )
        start, stop = int(match[1]), int(match[2])
        times = match[3] == "x" or (match[4] is None)
        step = int(match[4]) if match[4] is not None else 2
        if start < 1 or stop < start or (times and step < 2) or step < 1:
            raise TrainsimError(
                f"--gpus: range {part!r} needs 1 <= start <= stop and a step >= 1 (a factor >= 2)"
            )
        if stop > MAX_GPUS:
            raise TrainsimError(f"--gpus: range {part!r} ends past the largest count allowed, {MAX_GPUS}")
        listed = math.floor(math.log(stop / start, step)) + 1 if times else (stop - start) // step + 1
        if listed + len(counts) > MAX_GPU_COUNTS:
            raise TrainsimError(
                f"--gpus: {part!r} lists {listed:,} GPU counts; at most {MAX_GPU_COUNTS} are searched in one "
                "plan (use a doubling range such as 64..1024, or a larger step)"
            )
        value = start
        while value <= stop:
            counts.add(value)
            value = value * step if times else value + step
    if len(counts) > MAX_GPU_COUNTS:
        raise TrainsimError(
            f"--gpus: {len(counts)} GPU counts given; at most {MAX_GPU_COUNTS} are searched in one plan"
        )
    if not counts:
        raise TrainsimError(f"--gpus: no GPU count in {text!r}")
    if min(counts) < 1 or max(counts) > MAX_GPUS:
        raise TrainsimError(f"--gpus: counts must be between 1 and {MAX_GPUS}, got {text!r}")
    return tuple(sorted(counts))


def resolve_global_batch(
    workload: Workload, *, global_batch: int | None, tokens_per_step: int | None, seq_len: int | None
) -> int:
    """Samples per step from ``--global-batch`` or ``--tokens-per-step`` (both must agree), or the
    default (:data:`DEFAULT_TOKENS_PER_STEP` for language models, :data:`DEFAULT_GLOBAL_BATCH` else)."""
    tokens = workload.tokens_per_sample
    if global_batch is not None and global_batch < 1:
        raise TrainsimError(f"--global-batch must be a positive number of samples, got {global_batch}")
    if tokens_per_step is not None:
        if tokens_per_step < 1:
            raise TrainsimError(f"--tokens-per-step must be positive, got {tokens_per_step}")
        if not tokens:
            raise TrainsimError(f"--tokens-per-step needs a language model; {workload.name} has no sequence")
        if tokens_per_step % tokens:
            raise TrainsimError(
                f"--tokens-per-step {tokens_per_step} is not a whole number of sequences of {tokens} tokens"
            )
        if global_batch is not None and global_batch * tokens != tokens_per_step:
            raise TrainsimError(
                f"--global-batch {global_batch} x --seq-len {seq_len or tokens} = {global_batch * tokens} tokens "
                f"contradicts --tokens-per-step {tokens_per_step}; give one of them"
            )
        return tokens_per_step // tokens
    if global_batch is not None:
        return global_batch
    if tokens:
        return max(1, DEFAULT_TOKENS_PER_STEP // tokens)
    return DEFAULT_GLOBAL_BATCH


def max_micro_batch(space: SearchSpace, workload: Workload) -> int:
    """The largest micro-batch searched (see :class:`SearchSpace`)."""
    if space.max_micro_batch is not None:
        return space.max_micro_batch
    tokens = workload.tokens_per_sample
    cap = max(1, DEFAULT_MICRO_BATCH_TOKENS // tokens) if tokens else DEFAULT_MAX_MICRO_BATCH
    return min(DEFAULT_MAX_MICRO_BATCH, cap)


def layouts_for(
    space: SearchSpace, axes: SearchAxes, workload: Workload, gpus: int, global_batch: int, node_size: int
) -> tuple[list[PlanLayout], str]:
    """Every candidate of ``space`` on ``gpus`` GPUs, or none and the reason.

    The model-parallel degrees divide ``gpus`` (the data-parallel degree is what remains) and pass
    :func:`~simcore.parallel.layout.check_layout`; the global batch splits into whole micro-batches
    per data-parallel replica (global batch = dp x micro-batch x accumulation); HSDP needs whole
    nodes. Offload candidates are added by :func:`simcore.planner.search.prepare` (see the module
    docstring).
    """
    strategies = [s for s in space.strategies if s != "hsdp" or gpus % node_size == 0]
    if not strategies:
        return [], f"hsdp needs whole nodes of {node_size} GPUs"
    reasons: list[str] = []
    out: list[PlanLayout] = []
    cap = max_micro_batch(space, workload)
    for parallel in _parallel_layouts(axes, workload, gpus, reasons):
        dp = parallel.dp(gpus)
        if global_batch % dp:
            reasons.append(f"the global batch of {global_batch} does not split evenly over {dp} replicas")
            continue
        sizes = _micro_batches(space, cap, global_batch // dp, parallel, reasons)
        names = [s for s in strategies if parallel.pp == 1 or s in space.pipeline_strategies]
        if not names:
            reasons.append(
                f"pipelines run with {', '.join(space.pipeline_strategies)} only (--pipeline-strategies)"
            )
        for options in _options(space, parallel):
            out += [PlanLayout(s, m, parallel, options) for s in names for m in sizes]
    if not out:
        return [], _first_reason(reasons, gpus)
    return out, ""


def _first_reason(reasons: Sequence[str], gpus: int) -> str:
    if not reasons:
        return f"no combination of the searched degrees divides {gpus} GPUs"
    return (
        reasons[0]
        if len(set(reasons)) == 1
        else f"{reasons[0]} (and {len(set(reasons)) - 1} other reason(s))"
    )


def _parallel_layouts(
    axes: SearchAxes, workload: Workload, gpus: int, reasons: list[str]
) -> Iterator[ParallelLayout]:
    for tp in axes.tp:
        for cp in axes.cp:
            for pp in axes.pp:
                if gpus % (tp * cp * pp):
                    reasons.append(f"tp x pp x cp = {tp} x {pp} x {cp} does not divide {gpus} GPUs")
                    continue
                for ep in axes.ep:
                    for vpp in axes.vpp if pp > 1 else (1,):
                        if vpp > 1 and axes.blocks % (pp * vpp):
                            reasons.append(
                                f"the {axes.blocks} blocks do not divide into pp x vpp = {pp} x {vpp} "
                                "interleaved stages"
                            )
                            continue
                        layout = ParallelLayout(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp)
                        try:
                            check_layout(layout, gpus, workload)
                        except LayoutError as exc:
                            reasons.append(str(exc))
                            continue
                        yield layout


def _micro_batches(
    space: SearchSpace, cap: int, per_replica: int, parallel: ParallelLayout, reasons: list[str]
) -> tuple[int, ...]:
    sizes = (
        tuple(m for m in space.micro_batches if per_replica % m == 0)
        if space.micro_batches
        else _divisors(per_replica, cap)
    )
    if parallel.vpp > 1:  # the interleaved schedule needs micro-batches per step divisible by pp
        sizes = tuple(m for m in sizes if (per_replica // m) % parallel.pp == 0)
    if not sizes:
        reasons.append(f"no micro-batch size divides the {per_replica} samples per replica")
    return sizes


def _divisors(n: int, cap: int) -> tuple[int, ...]:
    """The divisors of ``n`` up to ``cap``, ascending, in min(cap, sqrt(n)) steps (batches may be huge)."""
    root = math.isqrt(n)
    if cap <= root:
        return tuple(d for d in range(1, cap + 1) if n % d == 0)
    small = [d for d in range(1, root + 1) if n % d == 0]
    both = set(small) | {n // d for d in small}
    return tuple(sorted(d for d in both if d <= cap))


def _options(space: SearchSpace, parallel: ParallelLayout) -> Iterator[ParallelOptions]:
    """Schedule x sequence parallelism x recompute where each applies (offload: see prepare)."""
    if parallel.pp == 1:
        schedules: tuple[str, ...] = ("1f1b",)
    elif parallel.vpp > 1:
        schedules = ("1f1b",) if "1f1b" in space.schedules else ()
    else:
        schedules = space.schedules
    if parallel.tp == 1:
        sps: tuple[bool, ...] = (False,)
    elif parallel.ep > 1:
        sps = (True,)  # Megatron-Core requires it for expert with tensor parallelism
    else:
        sps = space.sequence_parallel
    for schedule in schedules:
        for sp in sps:
            for recompute in space.recompute:
                overlap = space.tp_comm_overlap and sp
                yield ParallelOptions(
                    schedule, sp, recompute=recompute, tp_comm_overlap=overlap, ring_kv=space.ring_kv,
                    ring_merge=space.ring_merge,
                )  # fmt: skip


def describe_axes(space: SearchSpace, axes: SearchAxes) -> str:
    """The searched axes and their degrees, in words."""
    parts = [f"strategy ({len(space.strategies)})", "micro-batch"]
    for axis in AXES:
        degrees = getattr(axes, axis)
        if len(degrees) > 1 or degrees != (1,):
            parts.append(f"{axis} {'/'.join(map(str, degrees))}")
    if any(d > 1 for d in axes.pp):
        parts.append(f"schedule {'/'.join(space.schedules)}")
    if any(d > 1 for d in axes.tp):
        parts.append("sp " + "/".join("on" if s else "off" for s in space.sequence_parallel))
        if space.tp_comm_overlap:
            parts.append("tp comm overlap")
    parts.append(f"recompute {'/'.join(space.recompute)}")
    if space.offload != ("none",):
        parts.append(f"offload {'/'.join(space.offload)} (where nothing else fits)")
    return " x ".join(parts)
