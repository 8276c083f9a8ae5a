"""A parallel layout (data x tensor x pipeline x context x expert), its checks, and its placement.

``ParallelLayout`` fixes the model-parallel degrees; the data-parallel degree is what is left of
the GPU count: ``dp = gpus / (tp * pp * cp)``. Expert parallelism does not use GPUs of its own: as
in Megatron-Core, the ``ep`` ranks of an expert group are taken from the data- and context-parallel
ranks of one stage (``ep`` divides ``dp * cp``), and expert gradients are reduced over the
remaining ``dp * cp / ep`` ranks.

Placement (:class:`Placement`) follows Megatron-Core's default rank order ``tp-cp-ep-dp-pp``
(``megatron/core/parallel_state.py``, ``RankGenerator``): tensor-parallel ranks are consecutive,
so with ``tp`` dividing the GPUs per node a TP group sits inside one node (on NVLink/NVSwitch), then
context, data and pipeline ranks. A TP group that crosses nodes is allowed and priced on the fabric;
:meth:`Placement.notes` says so.

Uneven pipeline stages (``--pp-layers``): ``stage_layers`` lists the transformer blocks of each
virtual stage in order (``15,16,16,15``; Megatron-LM's ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` and torchtitan's ``pipeline_parallel_layers_per_stage``
give such lists); the embedding stays on the first stage and the final norm, output head and loss
on the last (:func:`simcore.parallel.pp.partition_stages`). The form ``first:F,last:L`` is
Megatron's: F blocks on the first stage, L on the last, the rest split evenly over the middle
stages, which Megatron requires to divide evenly (:func:`parse_stage_layers`). The form
``torchtitan`` (or ``torchtitan:I:O``) is torchtitan's split (``generate_llm_fqn_per_model_part``
in ``torchtitan/distributed/pipeline_parallel.py``, commit b5bcd76): the embedding counts as I
blocks and the norm plus output head as O (``pipeline_parallel_first_stage_less_layers`` /
``..._last_stage_less_layers``, both 1 by default), the ``layers + I + O`` effective blocks are split
evenly (the first stages one more), and the first and last stages hold I and O blocks fewer.
Without a list the split is even (the first ``layers % stages`` stages one block more).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = ["LayoutError", "ParallelLayout", "Placement", "check_layout", "parse_stage_layers"]


class LayoutError(TrainsimError):
    """A parallel layout that cannot run this model on this many GPUs; the message names the rule."""


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """Model-parallel degrees; ``vpp`` is the number of virtual stages (model chunks) per pipeline
    rank of the interleaved 1F1B schedule (Narayanan et al. 2021, sec. 2.2.2)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    # Transformer blocks per virtual stage, in order (None: an even split; see the module docstring).
    stage_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "ep", "vpp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayoutError(f"layout: {name} must be a positive integer, got {value!r}")
        if self.stage_layers is not None:
            stages = self.pp * self.vpp
            _need(
                len(self.stage_layers) == stages,
                f"--pp-layers lists {len(self.stage_layers)} stages; pp x vpp = {stages} needs one "
                f"block count per stage",
            )
            _need(
                all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.stage_layers),
                f"--pp-layers: every stage needs at least one block, got {list(self.stage_layers)}",
            )

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    @property
    def is_trivial(self) -> bool:
        """Pure data parallelism (every degree 1)."""
        return self.model_parallel == 1 and self.ep == 1 and self.vpp == 1

    def dp(self, gpus: int) -> int:
        """The data-parallel degree on ``gpus`` GPUs (see :func:`check_layout` for divisibility)."""
        return gpus // self.model_parallel

    def label(self, gpus: int) -> str:
        """``"dp16 tp8 pp8"``: the degrees above 1 (dp always)."""
        parts = [f"dp{self.dp(gpus)}"]
        for name in ("tp", "pp", "cp", "ep"):
            if getattr(self, name) > 1:
                parts.append(f"{name}{getattr(self, name)}")
        if self.stage_layers is not None:
            parts = [
                f"{p}[{','.join(map(str, self.stage_layers))}]" if p.startswith("pp") else p for p in parts
            ]
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        return " ".join(parts)


def parse_stage_layers(text: str, pp: int, vpp: int, layers: int) -> tuple[int, ...]:
    """Blocks per virtual stage from ``--pp-layers``: a comma list (``15,16,16,15``) or Megatron's
    ``first:F,last:L`` (either part may be left out; the middle stages share the rest evenly)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    stages = pp * vpp
    if len(parts) == 1 and parts[0].split(":")[0] == "torchtitan":
        return _torchtitan(parts[0], stages, layers)
    if parts and all(":" in p for p in parts):
        return _first_last(parts, stages, layers, text)
    try:
        counts = tuple(int(p) for p in parts)
    except ValueError:
        raise LayoutError(
            f"--pp-layers {text!r}: expected block counts per stage (15,16,16,15) or first:F,last:L"
        ) from None
    _need(bool(counts), f"--pp-layers {text!r}: expected block counts per stage (15,16,16,15)")
    _need(
        sum(counts) == layers,
        f"--pp-layers {text!r} sums to {sum(counts)} blocks; the model has {layers}",
    )
    return counts


def _torchtitan(text: str, stages: int, layers: int) -> tuple[int, ...]:
    weights = text.split(":")[1:] or ["1", "1"]
    _need(
        len(weights) == 2 and all(w.isdigit() for w in weights),
        f"--pp-layers {text!r}: expected torchtitan or torchtitan:I:O (embedding and output weights)",
    )
    first, last = int(weights[0]), int(weights[1])
    base, extra = divmod(layers + first + last, stages)
    counts = [base + (1 if s < extra else 0) for s in range(stages)]
    counts[0] -= first
    counts[-1] -= last
    _need(
        stages > 1 and min(counts) >= 1,
        f"--pp-layers {text!r}: {layers} blocks over {stages} stages leaves a stage without blocks",
    )
    return tuple(counts)


def _first_last(parts: list[str], stages: int, layers: int, text: str) -> tuple[int, ...]:
    given: dict[str, int] = {}
    for part in parts:
        key, _, value = part.partition(":")
        _need(
            key in ("first", "last") and key not in given and value.isdigit() and int(value) >= 1,
            f"--pp-layers {text!r}: expected first:F,last:L with F, L >= 1 (each at most once)",
        )
        given[key] = int(value)
    _need(stages > 1, f"--pp-layers {text!r}: first/last stages need pipeline parallelism (pp > 1)")
    middle = stages - len(given)
    rest = layers - sum(given.values())
    fits = rest == 0 if middle == 0 else rest >= middle and rest % middle == 0
    _need(
        fits,
        f"--pp-layers {text!r}: the other {rest} blocks do not split evenly over the {middle} middle "
        "stage(s) (Megatron requires it)",
    )
    even = [rest // middle] * middle if middle else []
    return tuple(
        ([given["first"]] if "first" in given else []) + even + ([given["last"]] if "last" in given else [])
    )


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise LayoutError(message)


def check_layout(layout: ParallelLayout, gpus: int, workload: Workload, *, cp_kind: str = "ring") -> None:
    """Raise :class:`LayoutError` naming the first rule ``layout`` breaks for ``workload`` on ``gpus``."""
    mp = layout.model_parallel
    _need(
        gpus % mp == 0,
        f"layout tp x pp x cp = {layout.tp} x {layout.pp} x {layout.cp} = {mp} does not divide "
        f"{gpus} GPUs; the GPU count must be a multiple of {mp}",
    )
    if layout.is_trivial:
        return
    dims = workload.dims
    if dims is None:
        raise LayoutError(
            f"model {workload.name!r} has no transformer shape: tensor, pipeline, context and expert "
            "parallelism need a transformer preset or shape file"
        )
    tp = layout.tp
    _need(dims.heads % tp == 0, f"attention heads ({dims.heads}) are not divisible by tp ({tp})")
    _need(dims.kv_heads % tp == 0, f"key/value heads ({dims.kv_heads}) are not divisible by tp ({tp})")
    _need(dims.ffn % tp == 0, f"ffn width ({dims.ffn}) is not divisible by tp ({tp})")
    stages = layout.pp * layout.vpp
    if layout.stage_layers is not None:
        _need(
            sum(layout.stage_layers) == dims.layers,
            f"--pp-layers {','.join(map(str, layout.stage_layers))} sums to {sum(layout.stage_layers)} "
            f"blocks; the model has {dims.layers}",
        )
    _need(layout.vpp == 1 or layout.pp > 1, f"vpp {layout.vpp} needs pipeline parallelism (pp > 1)")
    _need(
        dims.layers >= stages,
        f"layers ({dims.layers}) are fewer than pp x vpp = {layout.pp} x {layout.vpp} = {stages} pipeline stages",
    )
    _need(
        layout.vpp == 1 or layout.stage_layers is not None or dims.layers % stages == 0,
        f"the interleaved schedule needs layers ({dims.layers}) divisible by pp x vpp = {stages} "
        "(Megatron's rule), or an uneven split given with --pp-layers (a list, first:F,last:L or torchtitan)",
    )
    _check_context(layout, dims.seq_len, dims.heads, dims.kv_heads, cp_kind)
    _check_experts(layout, gpus, workload)


def _check_context(layout: ParallelLayout, seq_len: int, heads: int, kv_heads: int, cp_kind: str) -> None:
    cp = layout.cp
    if cp == 1:
        return
    # Megatron-Core's load-balanced causal context parallelism splits the sequence into 2 x cp chunks.
    _need(seq_len % (2 * cp) == 0, f"sequence length ({seq_len}) is not divisible by 2 x cp = {2 * cp}")
    if cp_kind == "ulysses":
        # DeepSpeed-Ulysses scatters heads over the context ranks (Jacobs et al. 2023, sec. 3.1).
        _need(
            heads % (layout.tp * cp) == 0,
            f"Ulysses context parallelism needs heads ({heads}) divisible by tp x cp = {layout.tp * cp}",
        )


def _check_experts(layout: ParallelLayout, gpus: int, workload: Workload) -> None:
    ep = layout.ep
    if ep == 1:
        return
    moe = workload.dims.moe if workload.dims is not None else None
    if moe is None:
        raise LayoutError(
            f"ep {ep} needs a mixture-of-experts model; {workload.name!r} has no experts "
            "(e.g. --model mixtral-8x7b)"
        )
    _need(moe.experts % ep == 0, f"experts ({moe.experts}) are not divisible by ep ({ep})")
    dp_cp = layout.dp(gpus) * layout.cp
    _need(
        dp_cp % ep == 0,
        f"ep ({ep}) must divide dp x cp = {dp_cp}: expert-parallel ranks come from the data- and "
        "context-parallel ranks of a stage",
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """Which global ranks form each process group, in Megatron-Core's ``tp-cp-ep-dp-pp`` order."""

    layout: ParallelLayout
    gpus: int

    @property
    def dp(self) -> int:
        return self.layout.dp(self.gpus)

    def rank(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """The global rank at these coordinates (tensor-parallel fastest, pipeline slowest)."""
        lay = self.layout
        return tp + lay.tp * (cp + lay.cp * (dp + self.dp * pp))

    def stage_ranks(self, stage: int) -> tuple[int, ...]:
        """Every rank of pipeline stage ``stage`` (a contiguous block)."""
        size = self.gpus // self.layout.pp
        return tuple(range(stage * size, (stage + 1) * size))

    def tp_group(self, stage: int) -> tuple[int, ...]:
        return tuple(self.rank(tp=t, pp=stage) for t in range(self.layout.tp))

    def cp_group(self, stage: int) -> tuple[int, ...]:
        return tuple(self.rank(cp=c, pp=stage) for c in range(self.layout.cp))

    def dp_group(self, stage: int) -> tuple[int, ...]:
        return tuple(self.rank(dp=d, pp=stage) for d in range(self.dp))

    def dp_cp_group(self, stage: int) -> tuple[int, ...]:
        """The ranks dense gradients are reduced over: data- and context-parallel together."""
        return tuple(self.rank(cp=c, dp=d, pp=stage) for d in range(self.dp) for c in range(self.layout.cp))

    def ep_group(self, stage: int) -> tuple[int, ...]:
        """The first ``ep`` ranks of the stage's data x context ranks: one expert-parallel group."""
        return self.dp_cp_group(stage)[: self.layout.ep]

    def expert_dp_group(self, stage: int) -> tuple[int, ...]:
        """The ranks expert gradients are reduced over (every ``ep``-th data x context rank)."""
        return self.dp_cp_group(stage)[:: self.layout.ep]

    def axis_groups(self, axis: str, stage: int) -> list[tuple[int, ...]]:
        """Every group of ``axis`` (tp, cp, dp_cp, ep) in pipeline stage ``stage``; rank 0's first.

        They all run their collectives at the same moment (every rank does the same work).
        """
        lay, dp = self.layout, self.dp
        if axis == "tp":
            return [
                tuple(self.rank(tp=t, cp=c, dp=d, pp=stage) for t in range(lay.tp))
                for d in range(dp)
                for c in range(lay.cp)
            ]
        if axis == "cp":
            return [
                tuple(self.rank(tp=t, cp=c, dp=d, pp=stage) for c in range(lay.cp))
                for d in range(dp)
                for t in range(lay.tp)
            ]
        groups = [tuple(r + t for r in self.dp_cp_group(stage)) for t in range(lay.tp)]
        if axis == "dp_cp":
            return groups
        if axis == "ep":
            return [g[i : i + lay.ep] for i in range(0, len(groups[0]), lay.ep) for g in groups]
        raise TrainsimError(f"unknown parallel axis {axis!r}; allowed: tp, cp, dp_cp, ep")

    def next_stage_rank(self, stage: int) -> int:
        """The representative rank of the stage after ``stage`` (wrapping, as interleaving does)."""
        return self.rank(pp=(stage + 1) % self.layout.pp)

    def notes(self, topology: Topology) -> list[str]:
        """Placement facts worth a line: a TP or CP group that crosses nodes (priced on the fabric)."""
        out = []
        for name, group in (("tensor", self.tp_group(0)), ("context", self.cp_group(0))):
            hosts = {topology.host_of_rank(r) for r in group}
            if len(hosts) > 1:
                out.append(
                    f"the {name}-parallel group spans {len(hosts)} nodes: its collectives run on the fabric"
                )
        return out
