"""Hugging Face's eager blocks of 2022 counted by hand: GPT-2's host syncs in its attention, T5's
fp16 overflow checks, and a block whose input needs no gradient (the layer benchmark's input)."""

from __future__ import annotations

from typing import Any

import pytest

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload
from simcore.workload.models.transformer import TransformerShape, build_layers, without_input_gradient
from simcore.workload.types import Layer

E = 2
S, H = 32, 64
BASE: dict[str, Any] = dict(layers=2, hidden=H, heads=4, ffn=256, vocab=100, seq_len=S)


def _block0(dtype: str = "fp16", **changes: Any) -> dict[str, Layer]:
    shape = TransformerShape(**{**BASE, **changes})
    return {layer.name[len("block0.") :]: layer for layer in build_layers(shape, dtype) if layer.block == 0}


def test_gpt2_eager_attention_syncs_twice_per_forward_and_never_with_flash_or_fused_softmax() -> None:
    """GPT2Attention._attn (2022): the divisor and the mask value, two blocking copies per call."""
    assert _block0(flash_attention=False, attention_syncs=2)["attn_core"].host_syncs == (2.0, 0.0)
    assert _block0(flash_attention=True, attention_syncs=2)["attn_core"].host_syncs == (0.0, 0.0)
    fused = _block0(flash_attention=False, fused_softmax=True, attention_syncs=2)
    assert fused["attn_core"].host_syncs == (0.0, 0.0)
    assert all(layer.host_syncs == (0.0, 0.0) for layer in _block0(flash_attention=False).values())


def test_the_presets_carry_the_counts_the_data_file_sources() -> None:
    counts = data_file("host_syncs.yaml")["in_model"]
    gpt2 = load_workload("gpt2-medium", dtype="fp16", flash_attention=False)
    core = next(layer for layer in gpt2.layers if layer.name == "block0.attn_core")
    assert core.host_syncs == (float(counts["hf_eager_attention"]), 0.0)
    bert = load_workload("bert-large", dtype="fp16", flash_attention=False)
    assert sum(layer.host_syncs[0] for layer in bert.layers) == 0.0  # math.sqrt: a Python float
    t5 = load_workload("t5-large", dtype="fp16", flash_attention=False)
    per_block = sum(layer.host_syncs[0] for layer in t5.layers if layer.block == 0)
    assert per_block == 2 * counts["hf_t5_inf_clamp"]  # after self-attention and after the FFN


def test_t5_fp16_inf_check_reads_the_sum_writes_and_reads_a_bool_mask_and_syncs() -> None:
    """residual add 3e per element, isinf e + 1, any 1: (3e + e + 2) s h forward; backward is the
    add's 2 x 3e s h only (isinf and any have no gradient); one sync each; none in bf16."""
    plain, clamped = _block0(), _block0(fp16_inf_clamp=True)
    for name in ("residual1", "residual2"):
        layer = clamped[name]
        assert layer.memory_bytes == (3 * E + E + 2) * S * H
        assert layer.memory_bytes * layer.bwd_bytes_ratio == pytest.approx(2 * 3 * E * S * H)
        assert layer.host_syncs == (1.0, 0.0)
        assert plain[name].memory_bytes == 3 * E * S * H and plain[name].host_syncs == (0.0, 0.0)
    bf16 = _block0("bf16", fp16_inf_clamp=True)
    assert bf16["residual1"].memory_bytes == 3 * E * S * H and bf16["residual1"].host_syncs == (0.0, 0.0)


def test_without_input_gradient_keeps_the_weight_gradient_only() -> None:
    """linear: one GEMM (the weight gradient, 2 s d_in d_out) reading input and output gradient;
    LayerNorm: reads x and the gradient (2e) and writes no input gradient; eager RMSNorm: the
    weight's (grad * x).sum(), 4e bytes per element."""
    block = _block0()
    qkv = without_input_gradient(block["attn_qkv"], E)
    assert qkv.bwd_flops == 2 * S * H * 3 * H
    assert qkv.memory_bytes * qkv.bwd_bytes_ratio == E * S * (H + 3 * H)
    assert qkv.fwd_flops == block["attn_qkv"].fwd_flops and qkv.memory_bytes == block["attn_qkv"].memory_bytes
    norm = without_input_gradient(block["norm1"], E)
    assert norm.memory_bytes * norm.bwd_bytes_ratio == 2 * E * S * H
    rms = without_input_gradient(_block0(norm="rmsnorm")["norm1"], E)
    assert rms.memory_bytes == (28 + 4 * E) * S * H
    assert rms.memory_bytes * rms.bwd_bytes_ratio == pytest.approx(4 * E * S * H)
    with pytest.raises(TrainsimError, match="not 'activation'"):
        without_input_gradient(block["mlp_act"], E)


def test_shape_files_accept_the_keys() -> None:
    shape = TransformerShape.from_mapping({**BASE, "attention_syncs": 2, "fp16_inf_clamp": True}, where="t")
    assert shape.attention_syncs == 2 and shape.fp16_inf_clamp
    with pytest.raises(TrainsimError, match="attention_syncs"):
        TransformerShape.from_mapping({**BASE, "attention_syncs": -1}, where="t")


def test_a_gpt2_config_json_gets_the_eager_attentions_syncs_as_the_preset() -> None:
    from pathlib import Path

    configs = Path(__file__).parents[2] / "data" / "hf_configs"
    from_config = load_workload(str(configs / "gpt2"), flash_attention=False)
    assert from_config.layers == load_workload("gpt2-small", flash_attention=False).layers
    core = next(layer for layer in from_config.layers if layer.name == "block0.attn_core")
    assert core.host_syncs == (2.0, 0.0)
