"""The two models calibration trains for real, in plain torch, and what they look like to the simulator.

- :class:`SmallCNN`: a stem convolution, then ``depth`` stages (3x3 convolution + ReLU, the first
  ``min(depth, 2)`` stages halving the resolution with max-pooling), global average pooling and a
  linear classifier. No batch norm, so every strategy (DDP, FSDP2, parameter server) trains the same
  function without buffer synchronisation.
- :class:`TinyTransformer`: a GPT-style decoder (token + learned position embeddings, ``depth``
  pre-norm blocks of causal self-attention and a 4x MLP, final norm, untied LM head).

Both expose ``blocks`` (the units FSDP2 shards one by one; a CNN stage or a transformer block).
:func:`describe` measures a model's layers with forward hooks on one sample and reports, per leaf
layer, the fields of the simulator's ``simcore.workload.types.Layer`` (params, forward/backward FLOPs,
activation and output bytes per sample), so the simulator can build the matching workload without
importing torch.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calibrate.train.config import MODEL_NAMES
from simcore.errors import TrainsimError

__all__ = ["MODEL_NAMES", "SmallCNN", "TinyTransformer", "build_model", "describe"]


class SmallCNN(nn.Module):
    """Image classifier; ``width`` channels in every stage, ``depth`` stages."""

    def __init__(self, width: int = 16, depth: int = 2, num_classes: int = 10, channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.ReLU())
        stages = []
        for index in range(depth):
            layers: list[nn.Module] = [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
            if index < 2:
                layers.append(nn.MaxPool2d(2))
            stages.append(nn.Sequential(*layers))
        self.blocks = nn.ModuleList(stages)
        self.head = nn.Linear(width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = self.stem(images)
        for stage in self.blocks:
            hidden = stage(hidden)
        return self.head(hidden.mean(dim=(2, 3)))


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention; the score/softmax/weighted-sum core runs in SDPA."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.core = AttentionCore()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, seq, width = hidden.shape
        q, k, v = self.qkv(hidden).split(width, dim=2)
        shape = (batch, seq, self.heads, width // self.heads)
        out = self.core(*(t.view(shape).transpose(1, 2) for t in (q, k, v)))
        return self.proj(out.transpose(1, 2).reshape(batch, seq, width))


class AttentionCore(nn.Module):
    """softmax(QK^T/sqrt(d)) V with a causal mask (a leaf, so :func:`describe` can count its FLOPs)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class TransformerBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.attn(self.norm1(hidden))
        return hidden + self.mlp(self.norm2(hidden))


class TinyTransformer(nn.Module):
    """Decoder-only language model over ``vocab`` tokens and sequences up to ``seq_len``."""

    def __init__(self, vocab: int = 64, width: int = 32, depth: int = 2, heads: int = 2, seq_len: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(TransformerBlock(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            hidden = block(hidden)
        return self.head(self.norm(hidden))


def build_model(
    name: str,
    *,
    width: int,
    depth: int,
    heads: int,
    seq_len: int,
    vocab: int,
    num_classes: int,
    channels: int,
) -> nn.Module:
    """The model called ``name`` ("cnn" or "transformer") with the given size knobs."""
    if name == "cnn":
        return SmallCNN(width=width, depth=depth, num_classes=num_classes, channels=channels)
    if name == "transformer":
        if width % heads:
            raise TrainsimError(f"--width {width} must be divisible by --heads {heads}")
        return TinyTransformer(vocab=vocab, width=width, depth=depth, heads=heads, seq_len=seq_len)
    raise TrainsimError(f"unknown model {name!r}; allowed: {', '.join(MODEL_NAMES)}")


def _flops(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> float:
    """Forward FLOPs of one leaf call (multiply-add = 2 FLOPs; elementwise ops = 1 per element)."""
    if isinstance(module, nn.Conv2d):
        kernel = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
        return 2.0 * kernel * output.numel()
    if isinstance(module, nn.Linear):
        return 2.0 * module.in_features * output.numel()
    if isinstance(module, AttentionCore):
        q = inputs[0]
        batch_heads_seq = q.shape[0] * q.shape[1] * q.shape[2]
        # QK^T and PV, each 2*seq*head_dim per query; causal masking is not subtracted (SDPA math
        # kernels on CPU compute the full square).
        return 4.0 * batch_heads_seq * q.shape[2] * q.shape[3]
    if isinstance(module, nn.LayerNorm):
        return 5.0 * output.numel()
    if isinstance(module, nn.Embedding):
        return 0.0
    return float(output.numel())  # ReLU, GELU, pooling: about one operation per output element


def _kind(module: nn.Module) -> str:
    kinds = {
        nn.Conv2d: "conv2d",
        nn.Linear: "linear",
        AttentionCore: "attention",
        nn.LayerNorm: "layernorm",
        nn.Embedding: "embedding",
        nn.ReLU: "relu",
        nn.GELU: "gelu",
        nn.MaxPool2d: "maxpool",
    }
    return kinds.get(type(module), type(module).__name__.lower())


def _block_of(name: str) -> int:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blocks" and len(parts) > 1 else -1


def describe(model: nn.Module, sample: torch.Tensor) -> dict[str, Any]:
    """Layer-by-layer shape of ``model`` for one sample (a batch of one), as plain JSON-able data.

    Each layer has the fields of ``simcore.workload.types.Layer``: ``name``, ``kind``, ``block`` (index in
    ``model.blocks``, -1 outside), ``params``, ``fwd_flops`` and ``bwd_flops`` (2x forward for layers
    with weights or attention, 1x for elementwise ones), ``activation_bytes`` (the input saved for
    backward, a first-order estimate), ``output_bytes`` and ``memory_bytes`` (input + output +
    weights moved in forward). All per sample, at the model's float32.
    """
    rows: list[dict[str, Any]] = []
    handles = []

    def hook(name: str):
        def record(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
            params = sum(p.numel() for p in module.parameters(recurse=False))
            fwd = _flops(module, inputs, output)
            in_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
            if isinstance(module, nn.Embedding):
                in_bytes = 0  # integer indices; the gradient needs no saved activation
            out_bytes = output.numel() * output.element_size()
            weighted = params > 0 or isinstance(module, AttentionCore)
            rows.append(
                {
                    "name": name,
                    "kind": _kind(module),
                    "block": _block_of(name),
                    "params": params,
                    "fwd_flops": fwd,
                    "bwd_flops": 2.0 * fwd if weighted else fwd,
                    "activation_bytes": float(in_bytes),
                    "output_bytes": float(out_bytes),
                    "memory_bytes": float(in_bytes + out_bytes + 4 * params),
                }
            )

        return record

    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            model(sample[:1])
    finally:
        for handle in handles:
            handle.remove()
    total = sum(p.numel() for p in model.parameters())
    return {
        "params": total,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "blocks": len(getattr(model, "blocks", [])),
        "dtype": "fp32",
        "layers": rows,
        "fwd_flops_per_sample": math.fsum(r["fwd_flops"] for r in rows),
    }
