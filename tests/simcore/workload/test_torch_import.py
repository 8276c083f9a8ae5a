"""Importing torch modules on the meta device: hand-counted figures and agreement with the presets."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload
from simcore.workload.models.transformer import TransformerShape, build_layers

torch = pytest.importorskip("torch")
nn: Any = torch.nn
F: Any = torch.nn.functional

HERE = "tests.simcore.workload.test_torch_import"


def mlp() -> Any:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def tiny_cnn() -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def not_a_module() -> str:
    return "nope"


def needs_real_data() -> Any:
    class Bad(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * float(x.sum().item())

    return Bad()


# --- a GPT-2 written from scratch (no transformers / torchvision), matched against the formulas ---

GPT_SHAPE = TransformerShape(layers=2, hidden=64, heads=4, ffn=256, vocab=100, seq_len=32, max_positions=32)


class _Attention(nn.Module):
    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)

    def forward(self, x: Any) -> Any:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.c_attn(x).split(h, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, h))


class _Block(nn.Module):
    def __init__(self, h: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(h), _Attention(h, heads), nn.LayerNorm(h)
        self.mlp = nn.Sequential(nn.Linear(h, ffn), nn.GELU(), nn.Linear(ffn, h))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _GPT(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        h = shape.hidden
        self.wte, self.wpe = nn.Embedding(shape.vocab, h), nn.Embedding(shape.position_table, h)
        self.h = nn.ModuleList(_Block(h, shape.heads, shape.ffn) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, shape.vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: Any) -> Any:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt() -> Any:
    return _GPT(GPT_SHAPE)


# --- ResNet-50 written from scratch (torchvision's v1.5 layout), matched against the preset ---


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width),
        )  # fmt: skip
        self.down = None
        if stride != 1 or cin != 4 * width:
            self.down = nn.Sequential(
                nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width)
            )

    def forward(self, x: Any) -> Any:
        return F.relu(self.body(x) + (x if self.down is None else self.down(x)))


def resnet50() -> Any:
    layers: list[Any] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        for index in range(blocks):
            layers.append(_Bottleneck(cin, width, 2 if index == 0 and stage > 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def test_mlp_matches_hand_count() -> None:
    w = load_workload(f"{HERE}:mlp", input_shape=(784,), dtype="fp32")
    assert [layer.kind for layer in w.layers] == ["linear", "activation", "linear"]
    assert w.layers[0].gemm == (1.0, 784.0, 256.0) and w.layers[2].gemm == (1.0, 256.0, 10.0)
    assert w.layers[0].memory_bytes == (784 + 256) * 4  # input read, output written; weights are the model's
    assert w.params == 784 * 256 + 256 + 256 * 10 + 10
    assert w.fwd_flops_per_sample == 2 * (784 * 256 + 256 * 10)
    assert w.bwd_flops_per_sample == 2 * w.fwd_flops_per_sample
    first, relu, last = w.layers
    assert first.activation_bytes == 784 * 4  # its input; weights are not activations
    assert relu.activation_bytes == 256 * 4 and relu.output_bytes == 256 * 4
    assert last.output_bytes == 10 * 4
    assert w.tokens_per_sample == 0 and w.block_names == ("0", "1", "2")


def test_tiny_cnn_matches_hand_count() -> None:
    w = load_workload(f"{HERE}:tiny_cnn", input_shape=(3, 32, 32))
    assert w.params == (3 * 16 * 9 + 16) + 2 * 16 + 16 * 32 * 9 + (32 * 10 + 10)
    conv1, conv2, fc = 2 * 3 * 16 * 9 * 32 * 32, 2 * 16 * 32 * 9 * 16 * 16, 2 * 32 * 10
    assert w.fwd_flops_per_sample == conv1 + conv2 + fc
    assert w.layers[0].activation_bytes == 3 * 32 * 32 * 2  # bf16 input of the first conv


def test_gpt_module_agrees_with_transformer_formulas() -> None:
    w = load_workload(f"{HERE}:gpt", seq_len=GPT_SHAPE.seq_len)
    formula = build_layers(GPT_SHAPE, "bf16")  # the causal decoder: the fused kernel skips half the scores
    assert w.params == sum(layer.params for layer in formula)  # tied lm_head counted once
    assert w.fwd_flops_per_sample == sum(layer.fwd_flops for layer in formula)
    assert w.bwd_flops_per_sample == sum(layer.bwd_flops for layer in formula)
    assert w.tokens_per_sample == GPT_SHAPE.seq_len
    assert w.block_names == ("h.0", "h.1")
    per_block = sum(layer.params for layer in w.layers if layer.block == 0)
    assert per_block == 12 * 64 * 64 + 13 * 64
    (attention,) = [layer for layer in w.layers if layer.name == "h.0.attn.(attention)"]
    assert attention.kind == "attention" and attention.block == 0
    assert attention.fwd_flops == 4 * 32 * 32 * 64 / 2 and attention.bwd_flops == 2.5 * attention.fwd_flops


def test_gpt_module_layers_have_the_kinds_the_roofline_prices() -> None:
    w = load_workload(f"{HERE}:gpt", seq_len=GPT_SHAPE.seq_len)
    kinds = {layer.name: layer.kind for layer in w.layers}
    assert kinds["wte"] == kinds["wpe"] == "embedding"
    assert kinds["h.0.ln_1"] == kinds["ln_f"] == "norm"
    assert kinds["h.0.attn.c_attn"] == kinds["h.0.mlp.0"] == kinds["lm_head"] == "linear"
    assert kinds["h.0.mlp.1"] == "activation" and kinds["h.0.(self)"] == "elementwise"  # residual adds
    assert kinds["loss"] == "loss"
    assert "module" not in kinds.values() and "functional" not in kinds.values()
    by_name = {layer.name: layer for layer in w.layers}
    # per sequence (m, k, n) of the forward GEMM, as the transformer builder records it
    assert by_name["h.1.attn.c_attn"].gemm == (32.0, 64.0, 192.0)
    assert by_name["h.1.mlp.2"].gemm == (32.0, 256.0, 64.0)
    assert by_name["lm_head"].gemm == (32.0, 64.0, 100.0)
    # execution order: the attention core sits between the QKV projection and the output projection
    names = [layer.name for layer in w.layers]
    assert (
        names.index("h.0.attn.c_attn") < names.index("h.0.attn.(attention)") < names.index("h.0.attn.c_proj")
    )


def test_resnet50_module_agrees_with_preset() -> None:
    w = load_workload(f"{HERE}:resnet50", input_shape=(3, 224, 224))
    preset = load_workload("resnet50")
    assert w.params == preset.params == 25_557_032
    assert w.fwd_flops_per_sample == pytest.approx(preset.fwd_flops_per_sample, rel=1e-9)
    # the 16 bottlenecks are the blocks, numbered as the preset's; stem, pool and head sit outside
    assert len(w.block_names) == len(preset.block_names) == 16
    per_block = [sum(layer.params for layer in block) for block in w.blocks()]
    assert per_block == [sum(layer.params for layer in block) for block in preset.blocks()]
    # each convolution is the same cuDNN kernel class and implicit GEMM as the preset's
    convs = [(layer.kind, layer.gemm) for layer in w.layers if layer.kind.startswith("conv")]
    assert convs == [(layer.kind, layer.gemm) for layer in preset.layers if layer.kind.startswith("conv")]
    assert {layer.kind for layer in w.layers} >= {"conv", "conv1x1", "norm", "activation", "pool", "linear"}


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("no_such_module_xyz:f", {"input_shape": (3,)}, "cannot import 'no_such_module_xyz'"),
        (f"{HERE}:missing", {"input_shape": (3,)}, "has no attribute 'missing'"),
        (f"{HERE}:not_a_module", {"input_shape": (3,)}, "not a torch.nn.Module"),
        (f"{HERE}:mlp", {}, "give the per-sample input"),
        (f"{HERE}:mlp", {"input_shape": (3, 4)}, "forward pass failed on meta tensors"),
        (f"{HERE}:needs_real_data", {"input_shape": (3,)}, "forward pass failed"),
    ],
)
def test_import_errors_are_user_errors(spec: str, kwargs: dict, message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        load_workload(spec, **kwargs)


def test_simcore_does_not_import_torch_at_module_import() -> None:
    code = (
        "import sys, simcore.workload.loader, simcore.compute.roofline, simcore.workload.torch_import, simcore.workload.models.cnn, "
        "simcore.workload.models.transformer; simcore.workload.loader.load_workload('gpt2-small'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_meta_trace_leaves_no_real_memory_behind() -> None:
    w = load_workload(f"{HERE}:gpt", seq_len=16)
    assert all(math.isfinite(layer.memory_bytes) for layer in w.layers)
