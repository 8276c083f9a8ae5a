"""The record of a parallel-layout step: a :class:`~simcore.report.StepReport` plus the layout.

Fields added to the what-if's version-1 schema (none renamed):

=========================  ========================================================================
layout                     ``"dp16 tp8 pp8"``: the degrees above 1 (dp always)
dp, tp, pp, cp, ep, vpp    the degrees (``vpp``: virtual stages per pipeline rank)
schedule                   pipeline schedule (``1f1b``, interleaved when vpp > 1; ``gpipe``; ``zb-h1``)
sequence_parallel          Megatron sequence parallelism on the tensor-parallel ranks
recompute, offload         the memory levers in force
microbatches               micro-batches per pipeline per step (gradient accumulation steps)
pipeline_bubble_fraction   idle share of the busiest pipeline rank (0 without pipelining)
stage_peak_memory_bytes    peak memory of one GPU of each pipeline stage, first to last
tp_comm_s, cp_comm_s,      exposed seconds per step of each model-parallel axis on the busiest
ep_comm_s, p2p_comm_s      stage (tensor, context, expert all-to-all, pipeline sends)
host_memory_bytes          host memory one GPU's offload needs (0 without offload)
placement_notes            placement facts (a TP group spanning nodes ...)
=========================  ========================================================================

``mfu`` counts the active parameters of a mixture-of-experts model (``6 x active params x tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simcore.report import StepReport

__all__ = ["ParallelStepReport"]


@dataclass(frozen=True, slots=True)
class ParallelStepReport(StepReport):
    """A :class:`StepReport` of a parallel layout (see the module docstring)."""

    layout: str = ""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    schedule: str = "1f1b"
    sequence_parallel: bool = False
    recompute: str = "none"
    offload: str = "none"
    microbatches: int = 1
    pipeline_bubble_fraction: float = 0.0
    stage_peak_memory_bytes: tuple[float, ...] = ()
    tp_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    p2p_comm_s: float = 0.0
    host_memory_bytes: float = 0.0
    placement_notes: tuple[str, ...] = field(default_factory=tuple)
