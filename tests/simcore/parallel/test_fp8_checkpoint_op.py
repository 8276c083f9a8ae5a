"""Which op an FP8 linear shows torchtitan's per-op checkpoint policy (``fp8_checkpoint_op``)."""

from __future__ import annotations

import pytest

from simcore.errors import TrainsimError
from simcore.parallel import ParallelLayout, ParallelOptions
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.workload.models.transformer import TransformerShape, build_workload
from tests.simcore.parallel.support import cluster

# a Llama-like decoder: bias-free linears (mm, counted by the policy), SwiGLU, RMSNorm
LLAMA_LIKE = build_workload(
    "small-llama",
    TransformerShape(
        layers=4, hidden=512, heads=8, ffn=1536, vocab=4096, seq_len=512, flash_attention=True,
        dropout=False, tied_embeddings=False, gated_ffn=True, norm="rmsnorm", bias=False,
    ),
    seq_len=None, dtype="bf16", source="test",
)  # fmt: skip


def _activations(fp8: str, op: str) -> float:
    options = ParallelOptions(recompute="selective-op", fp8_checkpoint_op=op)
    config = TrainingConfig(global_batch=16, micro_batch=2, dtype="fp8" if fp8 != "none" else "bf16", fp8=fp8)
    report = compose_parallel_step(
        LLAMA_LIKE, config, cluster("hgx-h100", 8), "fsdp", ParallelLayout(), options, path="fast"
    ).report
    return report.memory_breakdown["activations"]


def test_fp8_linears_seen_as_mm_save_what_bf16_linears_save() -> None:
    """Seen as aten.mm (torchao's Float8Tensor era) every second linear is recomputed, as in bf16;
    seen as _scaled_mm (today) all are saved: more activations."""
    bf16 = _activations("none", "scaled_mm")
    assert _activations("tensorwise", "mm") == pytest.approx(bf16, rel=1e-12)
    assert _activations("tensorwise", "scaled_mm") > bf16 * 1.05


def test_an_unknown_fp8_checkpoint_op_is_one_clear_error() -> None:
    with pytest.raises(TrainsimError, match="fp8 checkpoint op 'bmm' unknown; allowed: scaled_mm, mm"):
        ParallelOptions(fp8_checkpoint_op="bmm")
