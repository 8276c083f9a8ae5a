"""Small transformers and clusters for the parallel-layout tests."""

from __future__ import annotations

import functools

from simcore.topology import Topology
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import MoEDims, Workload


@functools.lru_cache(maxsize=16)
def small_gpt(
    layers: int = 8,
    *,
    flash: bool = True,
    dropout: bool = True,
    tied: bool = True,
    moe: MoEDims | None = None,
) -> Workload:
    """A GPT-like decoder small enough to simulate many times (8 heads, hidden 512)."""
    shape = TransformerShape(
        layers=layers,
        hidden=512,
        heads=8,
        ffn=2048,
        vocab=4096,
        seq_len=512,
        flash_attention=flash,
        dropout=dropout,
        tied_embeddings=tied,
        moe=moe,
    )
    return build_workload(f"small-gpt-{layers}", shape, seq_len=None, dtype="bf16", source="test")


@functools.lru_cache(maxsize=8)
def cluster(name: str, gpus: int) -> Topology:
    import topologies

    return topologies.load_cluster(name, gpus=gpus)
