"""The plain-torch models :mod:`calibrate.memory_truth` measures, with their inputs and loss.

Plain-torch copies of the simulator presets they are named after (parameter counts equal the
presets'), plus tiny variants for tests; every factory takes no arguments. :data:`MODELS` names
each factory as ``calibrate.memory_truth:<factory>`` (the module that re-exports them and the path
recorded in its measurements), so ``simcore.workload.loader.load_workload("calibrate.memory_truth:gpt2_small",
seq_len=128)`` traces the very module measured there. No dropout: masks would only add noise to the
comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from simcore.workload.torch_import import resolve_factory

_MODULE = "calibrate.memory_truth"  # the factories' recorded import path (re-exported there)

__all__ = [
    "GPT2",
    "MODELS",
    "Bert",
    "Bottleneck",
    "ModelSpec",
    "ResNet",
    "SelfAttention",
    "TransformerBlock",
    "bert_base",
    "gpt2_small",
    "gpt2_tiny",
    "resnet50",
    "resnet_tiny",
]


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection; the core runs in SDPA."""

    def __init__(self, width: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, seq, width = hidden.shape
        shape = (batch, seq, self.heads, width // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in self.qkv(hidden).split(width, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, width))


class TransformerBlock(nn.Module):
    """GPT-2's pre-norm block (``post_norm=False``) or BERT's post-norm layer; 4x GELU MLP."""

    def __init__(self, width: int, heads: int, *, causal: bool, post_norm: bool) -> None:
        super().__init__()
        self.post_norm = post_norm
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, causal)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.post_norm:
            x = self.ln_1(x + self.attn(x))
            return self.ln_2(x + self.mlp(x))
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019): learned positions, pre-norm blocks, LM head tied to the embedding."""

    def __init__(self, vocab: int, width: int, depth: int, heads: int, positions: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.blocks = nn.ModuleList(
            TransformerBlock(width, heads, causal=True, post_norm=False) for _ in range(depth)
        )
        self.ln_f = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            hidden = block(hidden)
        return F.linear(self.ln_f(hidden), self.wte.weight)


class Bert(nn.Module):
    """BERT's encoder and pooler (Devlin et al. 2019; Hugging Face ``BertModel``), no MLM head."""

    def __init__(self, vocab: int, width: int, depth: int, heads: int, positions: int) -> None:
        super().__init__()
        self.word, self.position, self.token_type = (
            nn.Embedding(vocab, width),
            nn.Embedding(positions, width),
            nn.Embedding(2, width),
        )
        self.ln_emb = nn.LayerNorm(width)
        self.blocks = nn.ModuleList(
            TransformerBlock(width, heads, causal=False, post_norm=True) for _ in range(depth)
        )
        self.pooler = nn.Linear(width, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.ln_emb(
            self.word(tokens) + self.position(positions) + self.token_type(torch.zeros_like(tokens))
        )
        for block in self.blocks:
            hidden = block(hidden)
        return torch.tanh(self.pooler(hidden[:, 0]))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 convolution, as torchvision's resnet50)."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = 4 * planes
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.downsample = (
            nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inplanes != out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """ResNet with bottleneck blocks (He et al. 2016, Table 1); the blocks are one flat ModuleList."""

    def __init__(self, stages: Sequence[int], width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        blocks, inplanes = [], width
        for index, count in enumerate(stages):
            planes = width * 2**index
            for repeat in range(count):
                blocks.append(Bottleneck(inplanes, planes, 2 if repeat == 0 and index > 0 else 1))
                inplanes = 4 * planes
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(images))), 3, 2, 1)
        for block in self.blocks:
            x = block(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def gpt2_small() -> nn.Module:
    """GPT-2 small: 124,439,808 parameters, as the ``gpt2-small`` preset."""
    return GPT2(vocab=50257, width=768, depth=12, heads=12, positions=1024)


def gpt2_tiny() -> nn.Module:
    """GPT-2's structure at toy size (tests, ``--quick``)."""
    return GPT2(vocab=512, width=64, depth=2, heads=2, positions=64)


def bert_base() -> nn.Module:
    """BERT-base encoder + pooler: 109,482,240 parameters, as the ``bert-base`` preset."""
    return Bert(vocab=30522, width=768, depth=12, heads=12, positions=512)


def resnet50() -> nn.Module:
    """ResNet-50: 25,557,032 parameters, as the ``resnet50`` preset (torchvision's count)."""
    return ResNet((3, 4, 6, 3))


def resnet_tiny() -> nn.Module:
    """ResNet's bottleneck structure at toy size (tests, ``--quick``)."""
    return ResNet((1, 1, 1, 1), width=8, classes=10)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A measured model: its factory, input (tokens of ``seq_len`` or square images), batch, preset."""

    name: str
    factory: str  # "module:function" for simcore.workload.loader.load_workload
    batch: int
    seq_len: int = 0  # token models
    image_size: int = 0  # image models
    preset: str | None = None  # the simulator preset it copies, if any

    def build(self) -> nn.Module:
        module_name, _, attr = self.factory.partition(":")
        return globals()[attr]() if module_name == _MODULE else _import_factory(self.factory)()

    def inputs(self, model: nn.Module, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch and its targets: class labels, or next tokens (BERT's loss ignores them, see ``_loss``)."""
        if self.seq_len:
            embedding = model.get_submodule("wte" if hasattr(model, "wte") else "word")
            vocab = int(embedding.num_embeddings)  # type: ignore[arg-type]
            tokens = torch.randint(vocab, (self.batch, self.seq_len), generator=generator)
            return tokens, torch.roll(tokens, -1, dims=1)
        images = torch.randn(self.batch, 3, self.image_size, self.image_size, generator=generator)
        return images, torch.randint(10, (self.batch,), generator=generator)


def _import_factory(spec: str) -> Callable[[], nn.Module]:
    return resolve_factory(spec)


MODELS: dict[str, ModelSpec] = {
    "gpt2-small": ModelSpec("gpt2-small", f"{_MODULE}:gpt2_small", batch=2, seq_len=128, preset="gpt2-small"),
    "bert-base": ModelSpec("bert-base", f"{_MODULE}:bert_base", batch=2, seq_len=128, preset="bert-base"),
    "resnet50": ModelSpec("resnet50", f"{_MODULE}:resnet50", batch=2, image_size=224, preset="resnet50"),
    "gpt2-tiny": ModelSpec("gpt2-tiny", f"{_MODULE}:gpt2_tiny", batch=2, seq_len=32),
    "resnet-tiny": ModelSpec("resnet-tiny", f"{_MODULE}:resnet_tiny", batch=2, image_size=32),
}


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy (GPT), class cross entropy (CNNs), a mean square (BERT's pooled output)."""
    if output.dim() == 3:
        return F.cross_entropy(output.flatten(0, 1), target.flatten())
    if output.dim() == 2 and target.dim() == 1:
        return F.cross_entropy(output, target)
    return output.square().mean()
