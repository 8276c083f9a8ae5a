"""How a parallel layout is run: pipeline schedule, sequence and context parallelism flavours,
recompute, offload and the mixture-of-experts routing figures.

Defaults are Megatron-LM's: the 1F1B schedule (interleaved when ``vpp > 1``), sequence parallelism
off unless asked for (``--sequence-parallel``; it is required, and so switched on, for expert
parallelism combined with tensor parallelism, as Megatron-Core enforces), ring attention for
context parallelism (Megatron-Core's ``p2p`` ``cp_comm_type``), no recompute, no offload, and
dropless routing with perfectly balanced experts (``expert_load`` 1), and tensor-parallel
collectives not overlapped with the GEMMs (``tp_comm_overlap``: Megatron-LM's ``--tp-comm-overlap``
/ torch async TP, :mod:`simcore.parallel.tp`; it needs sequence parallelism, as Megatron-LM
requires).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simcore.compute.saved_tensors import SAVED_TENSOR_RULES
from simcore.errors import TrainsimError
from simcore.parallel.cp import RING_KV, RING_MERGES
from simcore.parallel.pp import PIPELINE_SCHEDULES
from simcore.parallel.shard import TP_SAVED_INPUTS

__all__ = ["CP_KINDS", "OFFLOAD_MODES", "RECOMPUTE_MODES", "ParallelOptions", "parse_recompute"]

FP8_CHECKPOINT_OPS = ("scaled_mm", "mm")
RECOMPUTE_MODES = ("none", "selective", "selective-op", "full", "every-K")
OFFLOAD_MODES = ("none", "optimizer", "params", "activations")
CP_KINDS = ("ring", "ulysses")
_EVERY = re.compile(r"every-(\d+)")


def parse_recompute(text: str) -> tuple[str, int]:
    """(mode, K): ``none``, ``selective`` (Megatron-LM: the attention core), ``selective-op``
    (torchtitan's per-op policy, :mod:`simcore.compute.checkpointing`), ``full`` or ``every-K``
    (every K-th block; every-1 = full)."""
    text = text.strip()
    if text in ("none", "selective", "selective-op", "full"):
        return text, 1
    match = _EVERY.fullmatch(text)
    if not match or int(match[1]) < 1:
        raise TrainsimError(
            f"recompute {text!r} not understood; allowed: none, selective, selective-op, full, every-K (K >= 1)"
        )
    k = int(match[1])
    return ("full", 1) if k == 1 else ("every", k)


@dataclass(frozen=True, slots=True)
class ParallelOptions:
    """Run options of a parallel layout (see the module docstring for the defaults)."""

    schedule: str = "1f1b"
    sequence_parallel: bool = False
    cp_kind: str = "ring"
    recompute: str = "none"  # none | selective | selective-op | full | every-K
    offload: str = "none"  # none | optimizer | params | activations
    expert_load: float = 1.0  # tokens on the busiest expert rank / the mean
    capacity_factor: float | None = None  # tokens an expert keeps / the mean (None: dropless)
    tp_comm_overlap: bool = False  # sequence-parallel all-gather / reduce-scatter beside the GEMMs
    # The op an FP8 linear shows torchtitan's per-op checkpoint policy (``selective-op``):
    # ``scaled_mm`` (today's torchao calls torch._scaled_mm, which the policy saves and does not count)
    # or ``mm`` (torchao before its 2025 refactor dispatched aten.mm through its Float8Tensor subclass,
    # which the policy counts like a bf16 mm: every second one recomputed). See
    # simcore.compute.checkpointing.
    fp8_checkpoint_op: str = "scaled_mm"
    # Whose kernels decide the activations saved for backward: ``eager`` PyTorch (the workload as
    # built) or ``megatron-te`` (Megatron-Core on Transformer Engine's fused kernels), see
    # simcore.compute.saved_tensors.
    saved_tensors: str = "eager"
    # ring attention's per-step output merge and gradient accumulation (simcore.parallel.cp):
    # ``fused`` (Transformer Engine, Megatron-Core) or ``eager`` (torch's context_parallel, torchtitan)
    ring_merge: str = "fused"
    # the key/value heads ring attention moves and merges: ``grouped`` (the model's kv heads, as
    # Transformer Engine takes GQA) or ``repeated`` (expanded to the query heads before attention,
    # torchtitan's llama repeat_kv), see simcore.parallel.cp
    ring_kv: str = "grouped"
    # what a column-parallel linear saves of its sequence-parallel input (simcore.parallel.shard
    # TP_SAVED_INPUTS): ``shard`` (Megatron-LM) or ``gathered`` (torch DTensor TP, torchtitan)
    tp_saved_input: str = "shard"
    # pipeline sends that block their rank until done (Megatron-LM 2021: batch_isend_irecv, wait,
    # torch.cuda.synchronize(); simcore.parallel.pp); False: a send overlaps the next pass
    p2p_blocking: bool = False

    def __post_init__(self) -> None:
        if self.schedule not in PIPELINE_SCHEDULES:
            raise TrainsimError(
                f"pipeline schedule {self.schedule!r} unknown; allowed: {', '.join(PIPELINE_SCHEDULES)}"
            )
        if self.cp_kind not in CP_KINDS:
            raise TrainsimError(
                f"context parallelism {self.cp_kind!r} unknown; allowed: {', '.join(CP_KINDS)}"
            )
        if self.ring_merge not in RING_MERGES:
            raise TrainsimError(f"ring merge {self.ring_merge!r} unknown; allowed: {', '.join(RING_MERGES)}")
        if self.ring_kv not in RING_KV:
            raise TrainsimError(f"ring kv {self.ring_kv!r} unknown; allowed: {', '.join(RING_KV)}")
        if self.tp_saved_input not in TP_SAVED_INPUTS:
            raise TrainsimError(
                f"tp saved input {self.tp_saved_input!r} unknown; allowed: {', '.join(TP_SAVED_INPUTS)}"
            )
        parse_recompute(self.recompute)
        if self.offload not in OFFLOAD_MODES:
            raise TrainsimError(f"offload {self.offload!r} unknown; allowed: {', '.join(OFFLOAD_MODES)}")
        if not self.expert_load >= 1.0:
            raise TrainsimError(f"expert load imbalance must be >= 1 (1 = balanced), got {self.expert_load}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise TrainsimError(f"capacity factor must be > 0, got {self.capacity_factor}")
        if self.fp8_checkpoint_op not in FP8_CHECKPOINT_OPS:
            raise TrainsimError(
                f"fp8 checkpoint op {self.fp8_checkpoint_op!r} unknown; allowed: {', '.join(FP8_CHECKPOINT_OPS)}"
            )
        if self.saved_tensors not in SAVED_TENSOR_RULES:
            raise TrainsimError(
                f"saved tensors {self.saved_tensors!r} unknown; allowed: {', '.join(SAVED_TENSOR_RULES)}"
            )
        if self.p2p_blocking and self.schedule == "zb-h1":
            raise TrainsimError(
                "blocking pipeline sends (Megatron-LM 2021) are modelled for the 1f1b and gpipe "
                "schedules, not zb-h1"
            )
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise TrainsimError(
                "--tp-comm-overlap needs --sequence-parallel: Megatron-LM and torch async TP overlap "
                "sequence parallelism's all-gather and reduce-scatter with the GEMMs"
            )

    @property
    def recompute_mode(self) -> tuple[str, int]:
        return parse_recompute(self.recompute)

    @property
    def effective_expert_load(self) -> float:
        """The busiest expert rank's load: the imbalance, cut at the capacity factor (tokens beyond
        an expert's capacity are dropped: Fedus et al. 2021, "Switch Transformers", sec. 2.2)."""
        if self.capacity_factor is None:
            return self.expert_load
        return min(self.expert_load, self.capacity_factor)
