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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = ["LayoutError", "ParallelLayout", "Placement", "check_layout"]


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

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "ep", "vpp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayoutError(f"layout: {name} must be a positive integer, got {value!r}")

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
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        return " ".join(parts)


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
    _need(layout.vpp == 1 or layout.pp > 1, f"vpp {layout.vpp} needs pipeline parallelism (pp > 1)")
    _need(
        dims.layers >= stages,
        f"layers ({dims.layers}) are fewer than pp x vpp = {layout.pp} x {layout.vpp} = {stages} pipeline stages",
    )
    _need(
        layout.vpp == 1 or dims.layers % stages == 0,
        f"the interleaved schedule needs layers ({dims.layers}) divisible by pp x vpp = {stages}",
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
