"""Plain-torch transformers written as users write them, shaped like the presets they are compared with.

``gpt2_small`` is GPT-2 as Hugging Face's ``GPT2LMHeadModel`` runs it (pre-LN, fused QKV, tanh-GELU,
dropout, learned positions, tied output head) and ``llama_small`` a Llama block stack
(RMSNorm as ``LlamaRMSNorm`` computes it, rotary positions applied in the attention module, SwiGLU,
no biases, untied head; fused QKV and gate-up projections, as the preset counts them). Their shapes are
:data:`GPT2_SMALL` (the ``gpt2-small`` preset's) and :data:`LLAMA_SMALL`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from simcore.workload.models.transformer import TransformerShape

__all__ = [
    "GPT2_SMALL",
    "LLAMA_SMALL",
    "LLAMA_TINY",
    "gpt2_small",
    "llama_small",
    "llama_tiny",
    "mha_encoder",
]

# gpt2-small's dims (the preset's shape but for torch's fused tanh-GELU: the preset's eager
# "gelu_tanh" saves one tensor where eager autograd keeps four, see test_eager_gelu_saves_four_tensors)
GPT2_SMALL = TransformerShape(
    layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, seq_len=1024, max_positions=1024,
)  # fmt: skip
LLAMA_SMALL = TransformerShape(
    layers=4, hidden=1024, heads=16, ffn=2816, vocab=32000, seq_len=1024, tied_embeddings=False,
    gated_ffn=True, norm="rmsnorm", bias=False, positions="rotary", dropout=False,
)  # fmt: skip


class NewGELUActivation(nn.Module):
    """GPT-2's tanh approximation of GELU, eager (Hugging Face ``activations.NewGELUActivation``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPTAttention(nn.Module):
    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.c_attn(x).split(h, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, s, h)))


class GPTBlock(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        h = shape.hidden
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(h), GPTAttention(h, shape.heads), nn.LayerNorm(h)
        self.mlp = nn.Sequential(
            nn.Linear(h, shape.ffn), nn.GELU(approximate="tanh"), nn.Linear(shape.ffn, h), nn.Dropout(0.1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        h = shape.hidden
        self.wte, self.wpe = nn.Embedding(shape.vocab, h), nn.Embedding(shape.position_table, h)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPTBlock(shape) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, shape.vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt2_small() -> nn.Module:
    return GPT(GPT2_SMALL)


class LlamaRMSNorm(nn.Module):
    """Hugging Face's ``LlamaRMSNorm``: statistics in fp32, then back to the input's dtype."""

    def __init__(self, h: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    """Llama attention with one fused QKV projection (as the preset's ``attn_qkv``)."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        h, self.heads = shape.hidden, shape.heads
        self.qkv_proj, self.o_proj = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv_proj(x).split(h, dim=-1))
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, h))


class LlamaMLP(nn.Module):
    """SwiGLU with one fused gate-and-up projection (as the preset's ``mlp_in``; Phi-3's ``gate_up_proj``)."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        h, self.ffn = shape.hidden, shape.ffn
        self.gate_up_proj = nn.Linear(h, 2 * self.ffn, bias=False)
        self.down_proj, self.act_fn = nn.Linear(self.ffn, h, bias=False), nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.ffn, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


class LlamaLayer(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.input_layernorm, self.self_attn = LlamaRMSNorm(shape.hidden), LlamaAttention(shape)
        self.post_attention_layernorm, self.mlp = LlamaRMSNorm(shape.hidden), LlamaMLP(shape)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.head_dim = shape.head_width
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(LlamaLayer(shape) for _ in range(shape.layers))
        self.norm = LlamaRMSNorm(shape.hidden)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> Any:
        x = self.embed_tokens(idx)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=idx.device) / self.head_dim))
        angles = torch.outer(torch.arange(idx.shape[1], device=idx.device), inv)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def llama_small() -> nn.Module:
    return Llama(LLAMA_SMALL)


LLAMA_TINY = replace(LLAMA_SMALL, layers=2, hidden=64, heads=4, ffn=176, vocab=100, seq_len=32)


def llama_tiny() -> nn.Module:
    return Llama(LLAMA_TINY)


class MHAEncoder(nn.Module):
    """Two encoder layers on ``nn.MultiheadAttention`` (its out_proj is applied inside its forward)."""

    def __init__(self, h: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.MultiheadAttention(h, heads, batch_first=True) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for attn in self.layers:
            x = x + attn(x, x, x, need_weights=False)[0]
        return x


def mha_encoder() -> nn.Module:
    return MHAEncoder()
