"""Workload loading: presets by name, shape files (strict), and the Layer/Workload records."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload, preset_names
from simcore.workload.models.cnn import NetBuilder
from simcore.workload.types import Layer, Workload
from tests.paths import REPO, TESTS

DATA = TESTS / "data" / "models"
EXAMPLES = REPO / "simcore" / "workload" / "models" / "examples"


def _layer(name: str, block: int, params: int = 1) -> Layer:
    return Layer(name, "linear", block, params, 2.0, 4.0, 1.0, 1.0, 2.0)


def test_workload_properties_sum_layers() -> None:
    w = Workload(
        "w",
        (_layer("a", -1, 3), _layer("b", 0, 5), _layer("c", 0), _layer("d", 1)),
        ("b0", "b1"),
        "bf16",
        0,
        "test",
    )
    assert w.params == 10
    assert w.fwd_flops_per_sample == 8.0 and w.bwd_flops_per_sample == 16.0
    assert w.activation_bytes_per_sample == 4.0
    assert w.block_layer_indices() == ((1, 2), (3,))
    assert [layer.name for layer in w.blocks()[0]] == ["b", "c"]
    assert [layer.name for layer in w.outside_layers()] == ["a"]


@pytest.mark.parametrize(
    ("layers", "blocks", "message"),
    [
        ((), ("b0",), "no layers"),
        ((_layer("a", 0), _layer("b", 1), _layer("c", 0)), ("b0", "b1"), "not contiguous"),
        ((_layer("a", 2),), ("b0",), "block 2"),
    ],
)
def test_workload_rejects_inconsistent_layers(layers, blocks, message) -> None:
    with pytest.raises(TrainsimError, match=message):
        Workload("w", layers, blocks, "bf16", 0, "test")


def test_unknown_preset_lists_presets_and_suggests_close_match() -> None:
    with pytest.raises(TrainsimError) as info:
        load_workload("llama2-8b")
    text = str(info.value)
    assert "did you mean" in text and "llama2-7b" in text
    assert all(name in text for name in preset_names())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"dtype": "int4"}, "dtype"), ({"seq_len": 0}, "seq_len"), ({"image_size": -3}, "image_size")],
)
def test_bad_overrides_are_user_errors(kwargs, message) -> None:
    with pytest.raises(TrainsimError, match=message):
        load_workload("gpt2-small", **kwargs)


def test_learned_positions_cap_the_sequence_length() -> None:
    with pytest.raises(TrainsimError, match="1024 learned positions"):
        load_workload("gpt2-small", seq_len=2048)


def test_shape_file_equals_preset() -> None:
    from_file = load_workload(str(DATA / "llama2-7b-shape.yaml"))
    preset = load_workload("llama2-7b")
    assert from_file.layers == preset.layers
    assert from_file.name == "llama2-7b-shape"


def test_json_shape_file_with_gqa() -> None:
    w = load_workload(str(DATA / "gqa.json"))
    h, kv_width, f, v = 256, 2 * 32, 1024, 1000
    per_block = h + h * (h + 2 * kv_width) + h * h + h + 3 * h * f
    assert w.name == "gqa-json" and w.dtype == "fp16"
    assert w.params == 2 * v * h + 2 * per_block + h


def test_public_examples_load() -> None:
    gpt3 = load_workload(str(EXAMPLES / "gpt3-175b.yaml"))
    assert gpt3.params == pytest.approx(175.0e9, rel=0.01)  # Brown et al. 2020, Table 2.1
    cnn = load_workload(str(EXAMPLES / "cifar-cnn.yaml"))
    assert cnn.block_names == ("stage1", "stage2")
    conv_params = (3 * 9 * 64) + (64 * 9 * 64) + (64 * 9 * 128)
    norm_params = 2 * (64 + 64 + 128)
    assert cnn.params == conv_params + norm_params + 128 * 10 + 10


def test_layer_list_mlp_flops_and_image_size_override() -> None:
    mlp = load_workload(str(DATA / "mlp.yaml"), dtype="fp32")
    assert mlp.params == 784 * 256 + 256 + 256 * 10 + 10
    assert mlp.fwd_flops_per_sample == 2 * (784 * 256 + 256 * 10)
    small = load_workload(str(EXAMPLES / "cifar-cnn.yaml"))
    large = load_workload(str(EXAMPLES / "cifar-cnn.yaml"), image_size=64)
    assert large.params == small.params
    assert large.fwd_flops_per_sample == pytest.approx(4 * small.fwd_flops_per_sample, rel=0.01)


@pytest.mark.parametrize(
    ("file", "fragments"),
    [
        ("bad_unknown_key.yaml", ["unknown key 'hiddn'", "allowed keys", "kv_heads"]),
        ("bad_missing_key.yaml", ["missing key 'ffn'"]),
        ("bad_negative.yaml", ["'layers'", "positive integer", "-2"]),
        ("bad_norm.yaml", ["'norm'", "layernorm, rmsnorm", "batchnorm"]),
        ("bad_heads.yaml", ["multiple of heads"]),
        ("bad_op.yaml", ["layers[1]", "unknown operator 'convolution'", "conv, linear"]),
        ("bad_conv_key.yaml", ["layers[0].conv", "unknown key 'dilation'", "groups"]),
        ("bad_conv_zero.yaml", ["'out'", "positive integer"]),
        ("bad_top_key.yaml", ["unknown key 'optimiser'", "transformer"]),
        ("bad_both.yaml", ["exactly one of"]),
        ("bad_residual.yaml", ["residual branch must keep the shape"]),
        ("bad_syntax.yaml", ["not valid YAML"]),
        ("bad_input.yaml", ["'input'", "[channels, height, width]"]),
    ],
)
def test_malformed_shape_files_name_file_key_and_allowed_values(file: str, fragments: list[str]) -> None:
    with pytest.raises(TrainsimError) as info:
        load_workload(str(DATA / file))
    text = str(info.value)
    assert text.startswith(str(DATA / file))
    for fragment in fragments:
        assert fragment in text


def test_missing_shape_file_is_a_user_error() -> None:
    with pytest.raises(TrainsimError, match="does not exist"):
        load_workload("no/such/model.yaml")


def test_layer_list_kernel_larger_than_input_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big_kernel.yaml"
    path.write_text("input: [3, 4, 4]\nlayers:\n  - conv: {out: 8, kernel: 7, padding: 0}\n")
    with pytest.raises(TrainsimError, match=r"big_kernel\.yaml.*does not fit"):
        load_workload(str(path))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 5), st.integers(8, 64), st.integers(1, 3))
def test_wider_or_deeper_cnn_never_has_fewer_params_or_flops(width, extra, depth, size, more_layers) -> None:
    def build(channels: int, layers: int) -> Workload:
        net = NetBuilder((3, size, size), "bf16")
        for _ in range(layers):
            net.conv(channels, 3)
            net.norm()
            net.act()
        net.adaptive_pool(1)
        net.linear(10)
        return net.workload("cnn", "bf16", "test")

    base = build(width, depth)
    for bigger in (build(width + extra, depth), build(width, depth + more_layers)):
        assert bigger.params >= base.params
        assert bigger.fwd_flops_per_sample >= base.fwd_flops_per_sample


def test_a_transformer_preset_can_run_its_attention_eager() -> None:
    """Eager attention materialises the scores: more bytes moved and saved, the same FLOPs counted."""
    fused = load_workload("gpt2-medium", seq_len=512, flash_attention=True)
    eager = load_workload("gpt2-medium", seq_len=512, flash_attention=False)
    core = {w: next(layer for layer in w.layers if layer.name.endswith("attn_core")) for w in (fused, eager)}
    assert core[fused].kind == "attention" and core[eager].kind == "attention_math"
    assert core[eager].activation_bytes > core[fused].activation_bytes
    assert load_workload("gpt2-medium", seq_len=512) == fused  # the preset's own default
    with pytest.raises(TrainsimError, match="no attention"):
        load_workload("resnet50", flash_attention=False)
