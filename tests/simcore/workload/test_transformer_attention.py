"""2024-25 attention in the transformer shape, counted by hand: a separate head_dim, q/k norms,
post-norms, q/k/v-only biases, multi-head latent attention, sliding windows and attention sinks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload
from simcore.workload.models.transformer import TransformerShape, build_layers
from simcore.workload.types import Layer, MLADims

E = 2  # bf16 bytes

# A small Llama-like decoder: rotary, RMSNorm, SwiGLU, no biases, no dropout.
BASE: dict[str, Any] = dict(
    layers=2, hidden=64, heads=8, ffn=128, vocab=100, seq_len=32, tied_embeddings=False, gated_ffn=True,
    norm="rmsnorm", bias=False, positions="rotary", dropout=False,
)  # fmt: skip


def _layers(**changes: Any) -> dict[str, Layer]:
    return {layer.name: layer for layer in build_layers(TransformerShape(**{**BASE, **changes}), "bf16")}


def test_separate_head_dim_sets_projection_widths_and_attention_flops() -> None:
    """Qwen3-30B-A3B's pattern: 8 heads of 16 on a width of 64 (not 64 / 8 = 8), 2 KV heads."""
    s = 32
    layers = _layers(kv_heads=2, head_dim=16)
    q, kv = 8 * 16, 2 * 16
    assert layers["block0.attn_qkv"].params == 64 * (q + 2 * kv)
    assert layers["block0.attn_out"].params == q * 64
    core = layers["block0.attn_core"]
    assert core.fwd_flops == 0.5 * (2 * s * s * q + 2 * s * s * q)  # causal: half of QK^T and PV
    assert core.bwd_flops == 2.5 * core.fwd_flops
    assert core.activation_bytes == E * s * (q + 2 * kv) + 4 * 8 * s  # Q, K, V and the fp32 log-sum-exp
    assert core.output_bytes == E * s * q
    assert layers["block0.rotary"].memory_bytes == 12 * E * s * (q + kv)


def test_qk_norm_normalises_every_query_and_key_head() -> None:
    s, q, kv = 32, 8 * 16, 2 * 16
    norm = _layers(kv_heads=2, head_dim=16, qk_norm=True)["block0.attn_qk_norm"]
    assert norm.params == 2 * 16  # q_norm and k_norm weights of head width
    assert norm.memory_bytes == (28 + 4 * E) * s * (q + kv)  # eager RMSNorm over every head
    assert "block0.attn_qk_norm" not in _layers(kv_heads=2, head_dim=16)


def test_post_norms_add_two_norms_per_block() -> None:
    plain, post = _layers(), _layers(post_norms=True)
    assert sum(v.params for v in post.values()) - sum(v.params for v in plain.values()) == 2 * 2 * 64
    names = list(post)
    assert (
        names.index("block0.attn_out")
        < names.index("block0.post_attn_norm")
        < names.index("block0.residual1")
    )
    assert (
        names.index("block0.mlp_out") < names.index("block0.post_mlp_norm") < names.index("block0.residual2")
    )


def test_qkv_bias_alone_as_qwen2() -> None:
    layers = _layers(qkv_bias=True)
    assert layers["block0.attn_qkv"].params == 64 * 192 + 192
    assert layers["block0.attn_out"].params == 64 * 64
    assert layers["block0.mlp_in"].params == 64 * 256
    assert _layers(bias=True, out_bias=False)["block0.attn_out"].params == 64 * 64


MLA = MLADims(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, q_lora_rank=24)


def test_mla_projections_and_attention_counted_by_hand() -> None:
    """DeepSeek-V2 sec. 2.1: W^DQ (h x d_c'), W^UQ (d_c' x n(d_h+d_R)), W^DKV (h x d_c) with the shared
    rotary key W^KR (h x d_R), W^UK and W^UV (d_c x n d_h each), W^O (n d_v x h)."""
    s, h, n = 32, 64, 4
    layers = _layers(heads=n, mla=MLA)
    assert layers["block0.attn_q_down"].params == h * 24
    assert layers["block0.attn_q_norm"].params == 24
    assert layers["block0.attn_q_up"].params == 24 * n * (8 + 4)
    assert layers["block0.attn_kv_down"].params == h * (16 + 4)
    assert layers["block0.attn_kv_norm"].params == 16
    assert layers["block0.attn_kv_up"].params == 16 * n * (8 + 6)
    assert layers["block0.attn_out"].params == n * 6 * h
    core = layers["block0.attn_core"]
    assert core.fwd_flops == 0.5 * (2 * s * s * n * 12 + 2 * s * s * n * 6)  # QK^T over 12, PV over 6
    assert core.activation_bytes == E * s * (n * 12 + n * 12 + n * 6) + 4 * n * s
    assert core.output_bytes == E * s * n * 6
    assert layers["block0.rotary"].memory_bytes == 12 * E * s * (n * 4 + 4)  # query rope parts + one key head
    direct = _layers(heads=n, mla=MLADims(16, 8, 4, 6))  # q_lora_rank 0: one query projection
    assert direct["block0.attn_q"].params == h * n * 12 and "block0.attn_q_down" not in direct


def test_deepseek_v3_attention_and_totals_from_the_paper() -> None:
    """arXiv 2412.19437 sec. 4.2: h = 7168, 128 heads of 128 + 64 rotary, d_c = 512, d_c' = 1536;
    3 dense blocks of 18432, 58 blocks of 1 shared + 256 routed experts of 2048, vocab 129280."""
    w = load_workload("deepseek-v3")
    h, n = 7168, 128
    attention = h * 1536 + 1536 + 1536 * n * 192 + h * (512 + 64) + 512 + 512 * n * (128 + 128) + n * 128 * h
    block0 = sum(layer.params for layer in w.blocks()[0] if ".attn_" in layer.name)
    assert block0 == attention
    expert = 3 * h * 2048
    total = 61 * (attention + 2 * h) + 3 * 3 * h * 18432 + 58 * (h * 256 + 257 * expert) + 2 * 129280 * h + h
    assert w.params == total


@pytest.mark.parametrize(("s", "w"), [(1024, 256), (4096, 128), (512, 511)])
def test_sliding_window_computes_the_band_of_the_causal_mask(s: int, w: int) -> None:
    """A row i attends to min(i + 1, w) keys; the kernel's FLOPs are the band's area s*w - w^2/2
    (the continuous count, as the full causal mask's s^2/2), within w/2 pairs of the exact count."""
    full = _layers(seq_len=s)["block0.attn_core"]
    windowed = _layers(seq_len=s, sliding_window=w)["block0.attn_core"]
    band = s * w - w * w / 2
    assert windowed.fwd_flops == 4 * 64 * band
    assert windowed.bwd_flops == 2.5 * windowed.fwd_flops
    exact = sum(min(i + 1, w) for i in range(s))
    assert abs(band - exact) <= w / 2
    assert windowed.fwd_flops / full.fwd_flops == pytest.approx(band / (s * s / 2))
    assert windowed.activation_bytes == full.activation_bytes  # Q, K, V and the log-sum-exp only


def test_window_as_long_as_the_sequence_is_full_attention_and_eager_ignores_it() -> None:
    assert _layers(sliding_window=32) == _layers()
    assert _layers(sliding_window=64) == _layers()
    eager = _layers(seq_len=256, sliding_window=16, flash_attention=False)["block0.attn_core"]
    assert (
        eager == _layers(seq_len=256, flash_attention=False)["block0.attn_core"]
    )  # HF masks the full scores


def test_window_pattern_repeats_over_the_blocks() -> None:
    layers = _layers(layers=4, seq_len=256, sliding_window=16, window_pattern=(True, False))
    full = 0.5 * 4 * 256 * 256 * 64
    windowed = 4 * 64 * (256 * 16 - 16 * 16 / 2)
    assert [layers[f"block{b}.attn_core"].fwd_flops for b in range(4)] == [windowed, full, windowed, full]


def test_attention_sinks_are_one_parameter_per_head() -> None:
    with_sinks, plain = _layers(attention_sinks=True), _layers()
    assert with_sinks["block0.attn_core"].params == 8
    assert with_sinks["block0.attn_core"].fwd_flops == plain["block0.attn_core"].fwd_flops


def test_gpt_oss_120b_counted_by_hand() -> None:
    """The gpt-oss model card's 116.83B: biased q/k/v/o, router and experts (gate+up 2f, down), 64
    sinks per layer."""
    h, n, kv, d, f, layers, vocab = 2880, 64, 8, 64, 2880, 36, 201088
    attention = h * (n + 2 * kv) * d + (n + 2 * kv) * d + n * d * h + h + n
    experts = 128 * (h * 2 * f + 2 * f + f * h + h)
    block = attention + h * 128 + 128 + experts + 2 * h
    assert load_workload("gpt-oss-120b").params == layers * block + 2 * vocab * h + h


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"head_dim": 8, "mla": MLA}, "give head_dim or mla, not both"),
        ({"kv_heads": 2, "mla": MLA}, "kv_heads (2) must be left out"),
        ({"qk_norm": True, "mla": MLA}, "qk_norm is not defined with mla"),
        ({"hidden": 60}, "hidden (60) must be a multiple of heads (8), or give head_dim"),
        ({"window_pattern": (True,)}, "window_pattern needs sliding_window"),
        (
            {"sliding_window": 8, "window_pattern": (True,) * 3},
            "window_pattern has 3 entries, more than layers (2)",
        ),
        ({"sliding_window": 8, "causal": False}, "sliding_window is modelled for causal decoders only"),
    ],
)
def test_shape_refuses_contradictions(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(TrainsimError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TransformerShape(**{**BASE, **changes})
    assert TransformerShape(**{**BASE, "hidden": 60, "head_dim": 8}).q_width == 64  # head_dim lifts the rule


def test_shape_file_keys_for_the_new_attention() -> None:
    shape = TransformerShape.from_mapping(
        {
            **{k: v for k, v in BASE.items()},
            "sliding_window": 8,
            "window_pattern": ["sliding", "full"],
            "mla": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6},
        },
        where="test",
    )
    assert shape.window_pattern == (True, False) and shape.mla == MLADims(16, 8, 4, 6)
    assert shape.window(0) == 8 and shape.window(1) is None
    with pytest.raises(TrainsimError, match="key 'window_pattern': expected a list of sliding or full"):
        TransformerShape.from_mapping({**BASE, "window_pattern": ["local"]}, where="test")
    with pytest.raises(TrainsimError, match="missing key 'v_head_dim'"):
        TransformerShape.from_mapping(
            {**BASE, "mla": {"kv_lora_rank": 1, "qk_nope_head_dim": 1, "qk_rope_head_dim": 1}}, where="t"
        )


@pytest.mark.parametrize(("causal", "dropout"), [(True, True), (False, True), (True, False), (False, False)])
def test_eager_attention_bytes_follow_its_kernels(causal: bool, dropout: bool) -> None:
    """Eager attention (hidden 64, 8 heads, s 32, bf16), counted by hand: forward 2 score passes in
    the GEMMs plus scale 2, mask 2, softmax 2, dropout 2 + 1/2 between them, four layout copies of
    Q, K, V and the output; backward 4 passes in the GEMMs plus dropout 2 + 1/2, softmax 3, mask 2,
    scale 2, twice the GEMMs' Q/K/V/output bytes and the four copies again."""
    s, h, heads = 32, 64, 8
    core = _layers(flash_attention=False, causal=causal, dropout=dropout)["block0.attn_core"]
    scores = E * heads * s * s  # 16384 bytes
    io = E * 4 * s * h  # Q, K, V read, the output written: 16384 bytes
    between_fwd = 2 + 2 + (2 if causal else 0) + (2.5 if dropout else 0)
    between_bwd = 3 + 2 + (2 if causal else 0) + (2.5 if dropout else 0)
    fwd = io + 2 * scores + between_fwd * scores + 2 * io
    bwd = 2 * io + 4 * scores + between_bwd * scores + 2 * io
    assert core.kind == "attention_math"
    assert core.memory_bytes == pytest.approx(fwd)
    assert core.bwd_bytes_ratio * core.memory_bytes == pytest.approx(bwd)
    assert core.serial_fraction[0] * fwd == pytest.approx(between_fwd * scores + 2 * io)
    assert core.serial_fraction[1] * bwd == pytest.approx(between_bwd * scores + 2 * io)
    # GPT-2's case by number: forward (3 + 10.5) x 16384 = 221184 bytes, backward (4 + 13.5) x 16384
    if causal and dropout:
        assert (core.memory_bytes, core.bwd_bytes_ratio * core.memory_bytes) == pytest.approx(
            (221184, 286720)
        )


def test_t5_eager_attention_bytes_follow_its_kernels() -> None:
    """T5's eager attention (hidden 64, 8 heads, s 32, bf16), counted by hand from HF's T5Attention:
    forward, between the GEMMs, the position bias added in place (read, write: 2 passes of e bytes),
    scores.float() (e + 4 bytes), softmax in fp32 (4 + 4), .type_as (4 + e), dropout (2 + 1/2 passes):
    2 + 20/2 + 2.5 = 14.5 passes; backward dropout 2.5, the cast's gradient upcast (e + 4), softmax's
    backward on fp32 (4 + 4 + 4), the cast back (4 + e), nothing for the in-place add: 14.5; the
    softmax keeps its fp32 output for backward (4 bytes a score, not 2)."""
    s, h, heads = 32, 64, 8
    t5 = dict(positions="relative", causal=False, dropout=True, flash_attention=False, softmax_fp32=True)
    core = _layers(**t5)["block0.attn_core"]
    scores = heads * s * s
    io = E * 4 * s * h
    between_fwd = (2 * E + (E + 4) + (4 + 4) + (4 + E) + (2 * E + 1)) * scores
    between_bwd = ((2 * E + 1) + (E + 4) + (4 + 4 + 4) + (4 + E)) * scores
    assert between_fwd == between_bwd == 14.5 * E * scores
    assert core.memory_bytes == pytest.approx(io + 2 * E * scores + between_fwd + 2 * io)
    assert core.bwd_bytes_ratio * core.memory_bytes == pytest.approx(
        2 * io + 4 * E * scores + between_bwd + 2 * io
    )
    assert core.activation_bytes == E * 3 * s * h + (4 + 1 + E) * scores
    assert core.params == 32 * heads  # the relative-position buckets, in the first block only
    assert _layers(**t5)["block1.attn_core"].params == 0


def test_t5_ffn_drops_out_its_activation() -> None:
    """T5's DenseReluDense: wi, ReLU, dropout over the ffn width (read, write, 1-byte mask), wo; the
    output GEMM keeps that mask with the block's own dropout mask."""
    s, h, f = 32, 64, 128
    layers = _layers(gated_ffn=False, activation="relu", dropout=True, ffn_dropout=True)
    drop = layers["block0.mlp_act_dropout"]
    assert drop.kind == "dropout" and drop.memory_bytes == (2 * E + 1) * s * f
    assert layers["block0.mlp_out"].activation_bytes == E * s * f + s * h + s * f
    assert "block0.mlp_act_dropout" not in _layers(gated_ffn=False, activation="relu", dropout=True)


def test_fused_attention_keeps_the_one_kernel_rule() -> None:
    core = _layers()["block0.attn_core"]
    assert core.kind == "attention" and core.bwd_bytes_ratio == 2.0 and core.serial_fraction == (0.0, 0.0)


def test_megatron_fused_softmax_drops_the_scale_mask_kernels_and_the_copies() -> None:
    """Megatron-LM's eager attention (hidden 64, 8 heads, s 32, bf16, causal, dropout): forward 2
    score passes in the GEMMs plus fused softmax 2 and dropout 2 + 1/2; backward 4 plus softmax 3
    and dropout 2 + 1/2; no layout copies."""
    core = _layers(flash_attention=False, fused_softmax=True, dropout=True)["block0.attn_core"]
    scores, io = E * 8 * 32 * 32, E * 4 * 32 * 64
    assert core.memory_bytes == pytest.approx(io + 6.5 * scores)
    assert core.bwd_bytes_ratio * core.memory_bytes == pytest.approx(2 * io + 9.5 * scores)
    assert core.serial_fraction[0] * core.memory_bytes == pytest.approx(4.5 * scores)
    assert core.serial_fraction[1] * core.bwd_bytes_ratio * core.memory_bytes == pytest.approx(5.5 * scores)
    with pytest.raises(TrainsimError, match="fused_softmax"):
        TransformerShape.from_mapping({**BASE, "fused_softmax": "yes"}, where="shape")


@settings(max_examples=40, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4, 8]),
    s=st.integers(1, 256),
    causal=st.booleans(),
    dropout=st.booleans(),
    fused=st.booleans(),
)
def test_eager_attention_backward_moves_less_than_twice_and_serial_shares_are_fractions(
    heads: int, s: int, causal: bool, dropout: bool, fused: bool
) -> None:
    """Eager attention's backward moves more than its forward but less than the roofline's 2x, and
    the bytes between its GEMMs are a share of each phase's bytes."""
    core = _layers(
        heads=heads, seq_len=s, causal=causal, dropout=dropout, flash_attention=False, fused_softmax=fused
    )["block0.attn_core"]
    assert 1.0 < core.bwd_bytes_ratio < 2.0
    assert all(0.0 < share < 1.0 for share in core.serial_fraction)
