"""Saved activations under Megatron-Core + Transformer Engine's fused kernels, counted by hand per
operator of a Llama-style block, and what they never do (grow, touch other operators)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.saved_tensors import saved_tensor_workload
from simcore.errors import TrainsimError
from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import Workload
from tests.simcore.parallel.support import cluster

S, H, F, HEADS = 256, 512, 1376, 8
E = 2  # bf16


def _llama(gated: bool = True, norm: str = "rmsnorm") -> Workload:
    shape = TransformerShape(
        layers=2, hidden=H, heads=HEADS, ffn=F, vocab=1024, seq_len=S, gated_ffn=gated, norm=norm,
        positions="rotary", dropout=False, bias=False, tied_embeddings=False, flash_attention=True,
    )  # fmt: skip
    return build_workload("tiny-llama", shape, seq_len=None, dtype="bf16", source="test")


def _by_name(workload: Workload) -> dict[str, float]:
    return {layer.name: layer.activation_bytes for layer in workload.layers}


def test_fused_block_keeps_what_te_and_megatron_save() -> None:
    """Per token: RMSNorm keeps its bf16 input (2h, not eager's fp32 copy and downcast, 6h); the
    fused RoPE nothing; SwiGLU its input (2 x ffn elements: 4f bytes, not 6f); attention as before;
    without FP8 the linears keep their bf16 inputs."""
    eager = _by_name(_llama())
    fused = _by_name(saved_tensor_workload(_llama(), "megatron-te"))
    assert eager["block0.norm1"] == (4 + E) * S * H
    assert fused["block0.norm1"] == E * S * H
    assert fused["block0.rotary"] == 0.0
    assert eager["block0.mlp_act"] == 3 * E * S * F
    assert fused["block0.mlp_act"] == 2 * E * S * F
    for name in ("block0.attn_core", "block0.attn_qkv", "block0.attn_out", "block0.mlp_in", "block0.mlp_out"):
        assert fused[name] == eager[name], name


def test_te_fp8_linears_keep_a_one_byte_copy_of_their_input() -> None:
    """Delayed scaling (Transformer Engine): qkv and fc1 keep the FP8 ln_out (1 byte per input
    element), fc2 the FP8 copy of its input; the attention output projection's input stays kept in
    bf16 by the attention, plus the 1-byte copy. torchao's recipes keep the bf16 inputs."""
    fused = _by_name(saved_tensor_workload(_llama(), "megatron-te", "delayed"))
    assert fused["block0.attn_qkv"] == 1 * S * H
    assert fused["block0.mlp_in"] == 1 * S * H
    assert fused["block0.mlp_out"] == 1 * S * F
    assert fused["block0.attn_out"] == (E + 1) * S * H
    torchao = _by_name(saved_tensor_workload(_llama(), "megatron-te", "tensorwise"))
    assert torchao["block0.mlp_out"] == E * S * F


def test_layernorm_and_gelu_are_unchanged_and_eager_is_the_workload_itself() -> None:
    gpt = _llama(gated=False, norm="layernorm")
    assert saved_tensor_workload(gpt, "eager") is gpt
    fused = _by_name(saved_tensor_workload(gpt, "megatron-te"))
    eager = _by_name(gpt)
    assert fused["block0.norm1"] == eager["block0.norm1"]
    assert fused["block0.mlp_act"] == eager["block0.mlp_act"]


def test_unknown_rule_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(TrainsimError, match="allowed: eager, megatron-te"):
        saved_tensor_workload(_llama(), "apex")
    with pytest.raises(TrainsimError, match="saved tensors 'apex' unknown"):
        ParallelOptions(saved_tensors="apex")


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["none", "delayed", "tensorwise", "rowwise"]), st.booleans())
def test_fused_kernels_never_save_more_and_leave_flops_alone(fp8: str, gated: bool) -> None:
    base = _llama(gated=gated)
    fused = saved_tensor_workload(base, "megatron-te", fp8)
    for a, b in zip(base.layers, fused.layers, strict=True):
        assert b.activation_bytes <= a.activation_bytes or b.name.endswith("attn_out")
        assert (b.fwd_flops, b.bwd_flops, b.params, b.memory_bytes) == (
            a.fwd_flops, a.bwd_flops, a.params, a.memory_bytes,
        )  # fmt: skip
    assert fused.activation_bytes_per_sample <= base.activation_bytes_per_sample


def test_the_step_peak_drops_by_the_saved_bytes_of_a_micro_batch() -> None:
    """One GPU, no accumulation: the peak (at the head's backward, every layer's activations held)
    falls by the saved bytes the fused kernels drop, with the allocator's fragmentation on them."""
    from simcore.compute.memory import runtime_memory

    workload = _llama()
    config = TrainingConfig(global_batch=16, micro_batch=16)  # activations above the optimizer step
    topology = cluster("dgx-a100", 1)
    eager = simulate_parallel_step(workload, config, topology, "ddp", ParallelLayout())
    fused = simulate_parallel_step(
        workload, config, topology, "ddp", ParallelLayout(), ParallelOptions(saved_tensors="megatron-te")
    )
    dropped = 16 * (
        workload.activation_bytes_per_sample
        - saved_tensor_workload(workload, "megatron-te").activation_bytes_per_sample
    )
    expected = dropped * (1 + runtime_memory("gpu").fragmentation)
    assert eager.report.peak_memory_bytes - fused.report.peak_memory_bytes == pytest.approx(
        expected, rel=0.02
    )


def test_a_fused_swiglu_is_still_priced_as_swiglu() -> None:
    """Saving two halves instead of three leaves the kernel's kind (and so its time) as it was."""
    from simcore.compute.memory_kernels import memory_kind

    base, fused = _llama(), saved_tensor_workload(_llama(), "megatron-te")
    for a, b in zip(base.layers, fused.layers, strict=True):
        assert memory_kind(a) == memory_kind(b)
    assert any(memory_kind(b) == "swiglu" for b in fused.layers)
