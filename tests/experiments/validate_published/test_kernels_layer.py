"""The layer-benchmark rows (kind: layer): the benchmark's input needs no gradient."""

from __future__ import annotations

import pytest

from experiments.validate_published.kernels import LayerSetup, parse_layer
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload

ENTRY = {
    "device": ["a100-sxm-80gb"], "model": ["bert-large"], "dtype": "fp16", "batches": [8], "seq_lens": [128],
    "hidden": 1024, "attention": "eager", "input_grad_free": ["attn_qkv"],
}  # fmt: skip


def test_only_the_first_blocks_named_layers_lose_their_input_gradient() -> None:
    setup = parse_layer(ENTRY, "row 149", "A100")
    assert setup.input_grad_free == ("attn_qkv",)
    plain = load_workload("bert-large", seq_len=128, dtype="fp16", flash_attention=False)
    leaf = setup._leaf_input(plain)
    changed = [(a.name, b) for a, b in zip(plain.layers, leaf.layers, strict=True) if a != b]
    assert [name for name, _ in changed] == ["block0.attn_qkv"]
    qkv = changed[0][1]
    assert qkv.bwd_flops == qkv.fwd_flops == 2 * 128 * 1024 * 3 * 1024  # the weight-gradient GEMM only
    assert qkv.bwd_bytes_ratio == 1.0


def test_a_leaf_input_makes_the_block_faster_and_the_rate_higher() -> None:
    """Dropping the data-gradient GEMM of the q/k/v projections (6 b s h^2 of the 72 b s h^2 the block's
    GEMMs run) raises the benchmark's rate, by less than that share."""
    with_grad = LayerSetup(("a100-sxm-80gb",), ("bert-large",), "fp16", (64,), (128,), 1024, "eager")
    leaf = LayerSetup(
        ("a100-sxm-80gb",),
        ("bert-large",),
        "fp16",
        (64,),
        (128,),
        1024,
        "eager",
        input_grad_free=("attn_qkv",),
    )
    ratio = leaf.predict("layer_tflops").value / with_grad.predict("layer_tflops").value
    assert 1.0 < ratio < 72 / 66


def test_an_unknown_layer_name_is_one_clear_error() -> None:
    setup = parse_layer({**ENTRY, "input_grad_free": ["attn_qvk"]}, "row 149", "A100")
    with pytest.raises(TrainsimError, match=r"no layer 'block0\.attn_qvk'"):
        setup.predict("layer_tflops")
