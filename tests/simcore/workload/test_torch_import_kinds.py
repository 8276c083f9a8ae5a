"""What each kind of torch module becomes when imported: kinds, bytes moved and saved, counted by hand."""

from __future__ import annotations

from typing import Any

import pytest

from simcore.workload.loader import load_workload

torch = pytest.importorskip("torch")
nn: Any = torch.nn
F: Any = torch.nn.functional

from tests.simcore.workload import torch_import_models as models  # noqa: E402  (needs torch)

HERE = "tests.simcore.workload.test_torch_import_kinds"
MODELS = "tests.simcore.workload.torch_import_models"
S, H = 16, 32  # tokens and width of the token models below


class _Tokens(nn.Module):
    """An embedding, then ``body``, then a head to ``vocab`` logits."""

    def __init__(self, body: Any, vocab: int = 50) -> None:
        super().__init__()
        self.embed, self.body, self.head = nn.Embedding(vocab, H), body, nn.Linear(H, vocab, bias=False)

    def forward(self, tokens: Any) -> Any:
        return self.head(self.body(self.embed(tokens)))


def with_rmsnorm() -> Any:
    return _Tokens(models.LlamaRMSNorm(H))


def with_dropout() -> Any:
    return _Tokens(nn.Dropout(0.1))


def with_eager_gelu() -> Any:
    return _Tokens(models.NewGELUActivation())


class Conv1D(nn.Module):
    """Hugging Face GPT-2's projection: a weight of shape (in, out) applied with ``addmm``."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.empty(d_in, d_out)), nn.Parameter(torch.empty(d_out))

    def forward(self, x: Any) -> Any:
        out = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], -1)


def with_conv1d() -> Any:
    return _Tokens(Conv1D(H, H))


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.proj, self.norm = nn.Embedding(50, H), nn.Linear(H, H), nn.LayerNorm(H)

    def forward(self, tokens: Any) -> Any:
        return self.norm(self.proj(self.embed(tokens)))


def encoder() -> Any:
    return _Encoder()


def _layer(workload: Any, name: str) -> Any:
    (layer,) = [layer for layer in workload.layers if layer.name == name]
    return layer


def test_an_eager_rmsnorm_moves_what_its_operators_move() -> None:
    """LlamaRMSNorm at bf16: upcast (read 2, write 4), pow (4, 4), mean (4), x * rsqrt (4, 4),
    downcast (4, 2), weight * x (2, 2) bytes per element: 36 = 28 + 4e, the preset's count; it
    saves the fp32 input and the downcast result (4 + 2), plus an fp32 statistic per token."""
    w = load_workload(f"{HERE}:with_rmsnorm", seq_len=S)
    norm = _layer(w, "body")
    assert norm.kind == "rmsnorm" and norm.params == H
    # fp32 per token: mean written; + eps in place (read, write); rsqrt (read, write); read by the product
    per_token_stats = 4 * (1 + 2 + 2 + 1)
    assert norm.memory_bytes == 36 * S * H + per_token_stats * S
    assert norm.activation_bytes == (4 + 2) * S * H + 4 * S  # and the fp32 rsqrt per token


def test_dropout_counts_as_the_fused_kernel() -> None:
    """Read the input, write the output and a 1-byte mask; the mask is what backward keeps."""
    w = load_workload(f"{HERE}:with_dropout", seq_len=S)
    drop = _layer(w, "body")
    assert drop.kind == "dropout"
    assert drop.memory_bytes == (2 + 2 + 1) * S * H
    assert drop.activation_bytes == 1 * S * H


def test_eager_tanh_gelu_saves_four_tensors() -> None:
    """0.5 * x * (1 + tanh(c (x + 0.044715 x^3))): autograd keeps x (for pow), the tanh output and
    both factors of the last product; eight kernels, 18 element accesses (the preset's gelu_tanh)."""
    w = load_workload(f"{HERE}:with_eager_gelu", seq_len=S)
    gelu = _layer(w, "body")
    assert gelu.kind == "activation"
    assert gelu.memory_bytes == 18 * 2 * S * H
    assert gelu.activation_bytes == 4 * 2 * S * H


def test_a_custom_matmul_module_is_a_linear_with_its_gemm() -> None:
    w = load_workload(f"{HERE}:with_conv1d", seq_len=S)
    proj = _layer(w, "body")
    assert proj.kind == "linear" and proj.gemm == (float(S), float(H), float(H))
    assert proj.fwd_flops == 2 * S * H * H and proj.bwd_flops == 2 * proj.fwd_flops


def test_a_token_model_gets_the_presets_loss_layer() -> None:
    """Cross entropy over (seq, vocab) logits: fp32 log-probabilities saved, 12 + e bytes per logit moved."""
    w = load_workload(f"{HERE}:with_dropout", seq_len=S)
    loss = w.layers[-1]
    assert (loss.name, loss.kind, loss.block) == ("loss", "loss", -1)
    assert loss.activation_bytes == 4 * S * 50 and loss.memory_bytes == (12 + 2) * S * 50
    vision = load_workload("tests.simcore.workload.test_torch_import:mlp", input_shape=(784,))
    assert all(layer.kind != "loss" for layer in vision.layers)  # no sequence: no language-model loss
    encoder = load_workload(f"{HERE}:encoder", seq_len=S)  # hidden states out of a norm: no logits
    assert all(layer.kind != "loss" for layer in encoder.layers)


def test_multihead_attention_is_projections_and_a_fused_core() -> None:
    """nn.MultiheadAttention applies its out_proj's weight itself: that module never runs, and its
    parameters still sit in the block that uses them."""
    w = load_workload(f"{MODELS}:mha_encoder", input_shape=(S, 64))
    assert w.block_names == ("layers.0", "layers.1")
    assert sum(layer.params for layer in w.layers if layer.block >= 0) == w.params  # none left outside
    assert w.params == 2 * (4 * 64 * 64 + 4 * 64)
    attention = _layer(w, "layers.0.(attention)")
    assert attention.kind == "attention" and attention.fwd_flops == 4 * S * S * 64  # not causal
    projections = _layer(w, "layers.0.(self)")
    assert projections.kind == "linear" and projections.fwd_flops == 2 * S * 64 * (3 * 64 + 64)
    assert projections.params == 4 * 64 * 64 + 4 * 64
