"""Model presets: parameter counts against the published ones, FLOPs and activation formulas."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.workload.loader import load_workload, preset_names
from simcore.workload.models.transformer import TransformerShape, build_layers

# Published parameter counts. Exact figures where the architecture is fully determined (the
# count of the reference implementation); the paper's rounded figure otherwise.
PUBLISHED_PARAMS = {
    # Hugging Face transformers (GPT2LMHeadModel with tied wte, BertModel with pooler, LlamaForCausalLM,
    # MistralForCausalLM) on the model cards' configs, e.g. huggingface.co/openai-community/gpt2.
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "bert-base": 109_482_240,  # Devlin et al. 2019 rounds to 110M
    "bert-large": 335_141_888,  # Devlin et al. 2019 rounds to 340M (the paper's figure is 1.4% high)
    # T5EncoderModel on google-t5/t5-large's config (T5ForConditionalGeneration: 737,668,096)
    "t5-large": 334_939_648,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama2-34b": 33_743_970_304,  # CodeLlama-34b-hf config (LlamaForCausalLM)
    "mistral-7b": 7_241_732_096,
    # Mixture-of-experts (MixtralForCausalLM, DeepseekForCausalLM on their configs).
    "mixtral-8x7b": 46_702_792_704,
    "deepseek-moe-16b": 16_375_728_128,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    # GPT-3 175B (Brown et al. 2020, Table 2.1) on GPT-2's architecture: the exact count of that shape
    "gpt3-175b": 174_604_259_328,
    # torchvision model tables (pytorch.org/vision/stable/models.html, "Params").
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "resnext101-32x8d": 88_791_336,
    "inception-v3": 27_161_264,  # with the auxiliary classifier, as trained
    "vit-b16": 86_567_656,
    "vit-l16": 304_326_632,
    "vgg16": 138_357_544,
    "densenet121": 7_978_856,
    "efficientnetv2-s": 21_458_488,
    "convnext-large": 197_767_336,
    # CIFAR-10 ResNet-50 with the 3x3/1 stem and no max-pool (kuangliu/pytorch-cifar ResNet50).
    "resnet50-cifar10": 23_520_842,
}

# The papers' rounded totals, checked within 1% (BERT-Large excepted, see above).
ROUNDED_PARAMS = {
    "gpt2-small": 124e6,
    "gpt2-medium": 355e6,
    "gpt2-large": 774e6,
    "gpt2-xl": 1558e6,
    "bert-base": 110e6,
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,
    "llama2-34b": 34e9,  # Touvron et al. 2023, Table 1
    "mistral-7b": 7.24e9,
    "mixtral-8x7b": 46.7e9,  # Jiang et al. 2024: "47B"
    "deepseek-moe-16b": 16.4e9,  # Dai et al. 2024
    "llama3-8b": 8.0e9,
    "llama3-70b": 70.6e9,
    "gpt3-175b": 175.0e9,
    "llama3.1-405b": 405e9,  # Llama 3 (2024), Table 3
    "deepseek-v3": 671e9,  # arXiv 2412.19437 (the multi-token-prediction module not included)
    "qwen3-30b-a3b": 30.5e9,  # Qwen3 model card
    "qwen3-235b-a22b": 235e9,  # Qwen3 model card
    "gpt-oss-120b": 116.83e9,  # gpt-oss model card (arXiv 2508.10925), Table 1
    "resnet50": 25.6e6,
    "vgg16": 138.4e6,
    "densenet121": 8.0e6,
    "efficientnetv2-s": 21.5e6,
    "convnext-large": 197.8e6,
}

# torchvision "GFLOPS" columns are multiply-accumulates at 224x224: FLOPs = 2 x GMACs.
PUBLISHED_GMACS_224 = {
    "resnet50": 4.09,
    "resnet101": 7.80,
    "resnet152": 11.51,
    "resnext101-32x8d": 16.41,
    "vit-b16": 17.56,
    "vit-l16": 61.55,
    "vgg16": 15.47,
    "densenet121": 2.83,
    "convnext-large": 34.36,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_preset_params_match_reference_implementation_exactly(name: str) -> None:
    assert load_workload(name).params == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(ROUNDED_PARAMS))
def test_preset_params_within_one_percent_of_paper(name: str) -> None:
    assert load_workload(name).params == pytest.approx(ROUNDED_PARAMS[name], rel=0.01)


def test_every_preset_has_a_source_and_cifar_variants_exist() -> None:
    names = preset_names()
    for base in ("resnet50", "vgg16", "densenet121", "efficientnetv2-s", "convnext-large"):
        assert f"{base}-cifar10" in names
    for name in names:
        workload = load_workload(name)
        assert workload.source
        assert workload.block_names


# Published active parameters per token. The reports round to two or three digits and differ on
# whether the input embedding table (a lookup, no FLOPs) counts: gpt-oss leaves it out (5.13B),
# Qwen3 keeps it (3.35B here for "3.3B"), DeepSeek-V3's "37B" lies between the two counts.
PUBLISHED_ACTIVE = {
    "deepseek-v3": 37e9,
    "qwen3-30b-a3b": 3.3e9,
    "qwen3-235b-a22b": 22e9,
    "gpt-oss-120b": 5.13e9,
    "mixtral-8x7b": 12.9e9,  # Jiang et al. 2024: "13B active" (12.9B in the Mixtral release notes)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_moe_active_params_bracket_the_published_figure(name: str) -> None:
    """Active = all parameters but the idle routed experts (``top_k`` of ``experts`` work per token):
    the published figure lies between the count without the input embedding and the count with it
    (1% either side)."""
    w = load_workload(name)
    moe = w.dims.moe if w.dims is not None else None
    assert moe is not None
    idle = sum(
        layer.params * (moe.experts - moe.top_k) // moe.experts
        for layer in w.layers
        if layer.name.endswith(("experts_in", "experts_out"))
    )
    with_embedding = w.params - idle
    without = with_embedding - w.layers[0].params
    assert 0.99 * without <= PUBLISHED_ACTIVE[name] <= 1.01 * with_embedding


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS_224))
def test_cnn_forward_flops_match_torchvision_gmacs(name: str) -> None:
    gmacs = load_workload(name).fwd_flops_per_sample / 2e9
    assert gmacs == pytest.approx(PUBLISHED_GMACS_224[name], rel=0.01)


def test_cifar_variants_have_ten_classes_and_small_inputs() -> None:
    full, cifar = load_workload("vgg16"), load_workload("vgg16-cifar10")
    assert full.params - cifar.params == 4097 * 990  # the last linear: 4096 weights + bias per class
    assert load_workload("resnet50-cifar10").fwd_flops_per_sample == pytest.approx(2 * 1.30e9, rel=0.01)


def test_gpt2_small_forward_flops_follow_kaplan() -> None:
    """2 FLOPs per parameter per token (embedding table as the tied output projection) + 4*s*h per
    layer for attention as Kaplan counts it, of which a causal FlashAttention kernel executes half
    (forward) and 2.5x that in backward."""
    w = load_workload("gpt2-small")
    s, h, layers, positions = 1024, 768, 12, 1024 * 768
    matmul_params = w.params - positions - 2 * 12 * 2 * h - 2 * h  # no FLOPs in position table, norms, biases
    biases = layers * (3 * h + h + 4 * h + h)
    matmuls = 2 * (matmul_params - biases) * s
    attention = layers * 4 * s * s * h / 2
    assert w.fwd_flops_per_sample == pytest.approx(matmuls + attention, rel=1e-12)
    assert w.bwd_flops_per_sample == pytest.approx(2 * matmuls + 2.5 * attention)
    full = load_workload(str(_shape_file(causal=False)))
    assert full.fwd_flops_per_sample == pytest.approx(matmuls + 2 * attention, rel=1e-12)


def _shape_file(**extra: object):
    """GPT-2 small's shape as a shape file with ``extra`` keys."""
    import tempfile
    from pathlib import Path

    import yaml

    shape = {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 50257, "seq_len": 1024, **extra}
    path = Path(tempfile.mkdtemp()) / "gpt2.yaml"
    path.write_text(yaml.safe_dump({"name": "gpt2-shape", "transformer": shape}))
    return path


def test_activation_bytes_match_korthikanti_without_flash_attention() -> None:
    """Korthikanti et al. 2022: 34*s*h + 5*a*s^2 bytes per layer at 16-bit, with dropout."""
    s, h, a = 512, 256, 8
    shape = TransformerShape(
        layers=1, hidden=h, heads=a, ffn=4 * h, vocab=100, seq_len=s, flash_attention=False
    )
    block = [layer for layer in build_layers(shape, "bf16") if layer.block == 0]
    assert sum(layer.activation_bytes for layer in block) == 34 * s * h + 5 * a * s * s


def test_flash_attention_drops_the_quadratic_term() -> None:
    s, h, a = 512, 256, 8
    shape = TransformerShape(layers=1, hidden=h, heads=a, ffn=4 * h, vocab=100, seq_len=s)
    block = [layer for layer in build_layers(shape, "bf16") if layer.block == 0]
    assert sum(layer.activation_bytes for layer in block) == 34 * s * h + 4 * a * s  # + fp32 log-sum-exp


def test_seq_len_override_scales_tokens_and_keeps_params() -> None:
    base, long = load_workload("llama2-7b"), load_workload("llama2-7b", seq_len=8192)
    assert long.tokens_per_sample == 8192 and long.params == base.params
    assert long.fwd_flops_per_sample > 2 * base.fwd_flops_per_sample  # attention grows with s^2


def test_blocks_group_layers_contiguously() -> None:
    w = load_workload("llama2-7b")
    groups = w.block_layer_indices()
    # norm, qkv, rotary, attention, out, residual, norm, up, activation, down, residual
    assert len(groups) == 32 and all(len(g) == 11 for g in groups)
    assert all(g == tuple(range(g[0], g[-1] + 1)) for g in groups)
    assert (
        sum(layer.params for block in w.blocks() for layer in block)
        + sum(layer.params for layer in w.outside_layers())
        == w.params
    )


def test_dtype_scales_bytes_not_flops() -> None:
    half, full = load_workload("gpt2-small", dtype="bf16"), load_workload("gpt2-small", dtype="fp32")
    assert full.fwd_flops_per_sample == half.fwd_flops_per_sample
    # Tensors double; 1-byte dropout masks and the fp32 loss logits do not.
    assert (
        half.activation_bytes_per_sample
        < full.activation_bytes_per_sample
        < 2 * half.activation_bytes_per_sample
    )


shapes = st.fixed_dictionaries(
    {
        "layers": st.integers(1, 6),
        "heads": st.sampled_from([1, 2, 4]),
        "head_dim": st.integers(1, 32),
        "ffn": st.integers(1, 512),
        "vocab": st.integers(1, 1000),
        "seq_len": st.integers(1, 256),
        "gated_ffn": st.booleans(),
    }
)


def _shape(d: dict[str, int], **changes: int) -> TransformerShape:
    merged = {**d, **changes}
    return TransformerShape(
        layers=merged["layers"],
        hidden=merged["heads"] * merged["head_dim"],
        heads=merged["heads"],
        ffn=merged["ffn"],
        vocab=merged["vocab"],
        seq_len=merged["seq_len"],
        gated_ffn=bool(merged["gated_ffn"]),
    )


def _totals(shape: TransformerShape) -> tuple[int, float, float]:
    layers = build_layers(shape, "bf16")
    return (
        sum(x.params for x in layers),
        sum(x.fwd_flops for x in layers),
        sum(x.activation_bytes for x in layers),
    )


@settings(max_examples=60, deadline=None)
@given(shapes, st.sampled_from(["layers", "head_dim", "ffn", "vocab", "seq_len"]), st.integers(1, 8))
def test_growing_any_dimension_never_shrinks_params_flops_or_activations(d, key, extra) -> None:
    small, large = _totals(_shape(d)), _totals(_shape(d, **{key: d[key] + extra}))
    assert all(big >= little for big, little in zip(large, small, strict=True))


def test_moe_presets_route_top_k_experts_per_token() -> None:
    """FLOPs per token count top_k experts (Mixtral: 2 of 8), parameters all of them."""
    mixtral = load_workload("mixtral-8x7b", seq_len=1024)
    dims = mixtral.dims
    assert dims is not None and dims.moe is not None and (dims.moe.experts, dims.moe.top_k) == (8, 2)
    experts = [layer for layer in mixtral.layers if layer.name.endswith("experts_in")]
    assert len(experts) == 32
    one_expert_in = 4096 * 2 * 14336  # gate and up projections of one SwiGLU expert
    assert experts[0].params == 8 * one_expert_in
    assert experts[0].fwd_flops == 2 * 2 * 1024 * one_expert_in
    deepseek = load_workload("deepseek-moe-16b")
    first_block = [layer.name for layer in deepseek.layers if layer.block == 0]
    assert "block0.mlp_out" in first_block and not any("experts" in n for n in first_block)  # dense
    assert any(layer.name == "block1.shared_in" for layer in deepseek.layers)


def test_moe_shape_errors_name_the_key() -> None:
    from simcore.errors import TrainsimError

    base = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 100, "seq_len": 16}
    with pytest.raises(TrainsimError, match=r"moe top_k \(3\) must be at most experts \(2\)"):
        TransformerShape.from_mapping(
            {**base, "moe": {"experts": 2, "top_k": 3, "expert_ffn": 32}}, where="t"
        )
    with pytest.raises(TrainsimError, match="unknown key 'shared'"):
        TransformerShape.from_mapping(
            {**base, "moe": {"experts": 2, "top_k": 1, "expert_ffn": 32, "shared": 1}}, where="t"
        )
