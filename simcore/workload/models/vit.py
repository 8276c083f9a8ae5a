"""Vision Transformers (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Table 1) as torchvision
builds them: a ``patch x patch`` convolution into ``hidden`` channels, a class token and learned
position embeddings over the ``(image / patch)^2 + 1`` tokens, pre-LayerNorm encoder blocks
(attention with biased in/out projections, a GELU MLP), a final LayerNorm and a linear head on the
class token. torchvision vit_b_16: 86,567,656 parameters; vit_l_16: 304,326,632.

The encoder blocks are the transformer family's (:mod:`simcore.workload.models.transformer`) with
bidirectional (non-causal) fused attention and no dropout (torchvision's default ``dropout=0.0``).
"""

from __future__ import annotations

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.models.transformer import TransformerShape, block_layers, matmul_layer
from simcore.workload.types import Layer, Workload

__all__ = ["build_vit"]


def build_vit(
    name: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    patch: int,
    image_size: int,
    classes: int,
    dtype: str,
    source: str,
) -> Workload:
    """The ViT workload at ``image_size`` (a multiple of ``patch``)."""
    if image_size % patch:
        raise TrainsimError(f"{name}: image size {image_size} is not a multiple of the patch size {patch}")
    e = DTYPE_BYTES[dtype]
    patches = (image_size // patch) ** 2
    tokens = patches + 1
    shape = TransformerShape(
        layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=classes, seq_len=tokens,
        positions="learned", dropout=False, causal=False,
    )  # fmt: skip
    pixels = 3 * image_size * image_size
    patch_flops = 2.0 * 3 * patch * patch * hidden * patches
    stem = [
        Layer("conv_proj", "conv", -1, 3 * patch * patch * hidden + hidden, patch_flops, 2.0 * patch_flops,
              e * pixels, e * patches * hidden, e * (pixels + patches * hidden),
              (float(patches), float(3 * patch * patch), float(hidden))),
        # the class token prepended and the position embeddings added: one elementwise pass
        Layer("class_token+pos_embedding", "embedding", -1, hidden + tokens * hidden, 0.0, 0.0, 0.0,
              e * tokens * hidden, 3.0 * e * tokens * hidden),
    ]  # fmt: skip
    body: list[Layer] = []
    for block in range(layers):
        body.extend(block_layers(shape, block, e))
    head = [
        Layer("encoder.ln", "norm", -1, 2 * hidden, 0.0, 0.0, e * tokens * hidden, e * tokens * hidden,
              2.0 * e * tokens * hidden),
        matmul_layer("heads.head", -1, 1, hidden, classes, True, e, 0.0),
    ]  # fmt: skip
    return Workload(
        name=name,
        layers=tuple(stem + body + head),
        block_names=tuple(f"encoder_layer_{i}" for i in range(layers)),
        dtype=dtype,
        tokens_per_sample=0,
        source=source,
    )
