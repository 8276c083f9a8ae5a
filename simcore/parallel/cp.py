"""Context-parallel communication of one attention layer, per micro-batch.

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv 2310.01889;
Megatron-Core's ``p2p`` context parallelism): each of the ``cp`` ranks holds ``s/cp`` tokens; the
key/value blocks travel around the ring in ``cp - 1`` steps, each step's send overlapped with the
attention of the block already received. A step costs ``max(send, attention of one block)``, so
only what the send exceeds the block's compute is exposed. Backward passes the key/value blocks
and their gradients (twice the bytes) against the backward of one block.

Causal load balance: Megatron-Core / Transformer Engine and torch's ``context_parallel`` (what
torchtitan runs) cut the sequence into ``2 cp`` chunks and give rank ``r`` chunks ``r`` and
``2cp - 1 - r`` (torch: ``_cp_options.enable_load_balance = True``, the round-robin note of
``torch/distributed/tensor/experimental/_attention.py``); every rank then computes ``1/cp`` of the
causal attention (:mod:`simcore.parallel.shard`), and every ring step after the first is half a
block pair (the full query chunk against the first half of the keys, or the second half of the
queries against all keys), so each of the ``cp`` steps holds ``1/cp`` of the rank's attention. torch
moves the keys/values with one all-gather issued at the first step and waited at the second
(``_RotateMethod.ALL_GATHER``, its default) and the key/value gradients round the ring, each hop
waited one step later: the same bytes per hop, hidden the same way.

Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509, sec. 3.1): an all-to-all
turns the sequence split into a head split before attention (queries, keys and values) and one
turns it back after (the output); backward does the same two. Not overlapped.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.parallel.shard import ShardSpec, layer_role
from simcore.workload.types import Layer, TransformerDims

__all__ = ["context_parallel_exposed_s"]

Price = Callable[[str, float], float]


def context_parallel_exposed_s(
    layer: Layer,
    dims: TransformerDims,
    spec: ShardSpec,
    *,
    micro_batch: int,
    elem: int,
    kind: str,
    attention_s: tuple[float, float],
    price: Price,
) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of ``layer``'s context-parallel communication.

    ``attention_s`` is this rank's attention compute (forward, backward) for the micro-batch;
    ``price(op, bytes)`` prices a collective over the context-parallel group.
    """
    cp = spec.cp
    if cp == 1 or layer_role(layer) != "split" or not layer.name.endswith("attn_core"):
        return 0.0, 0.0
    tokens = micro_batch * dims.seq_len / cp
    kv_width = 2 * dims.kv_heads * dims.head_dim / spec.tp
    if kind == "ulysses":
        qkv = tokens * (dims.hidden / spec.tp + kv_width) * elem
        out = tokens * dims.hidden / spec.tp * elem
        each_way = price("all_to_all", qkv) + price("all_to_all", out)
        return each_way, each_way
    block = tokens * kv_width * elem
    fwd_step = price("send_recv", block)
    bwd_step = price("send_recv", 2.0 * block)
    fwd = (cp - 1) * max(0.0, fwd_step - attention_s[0] / cp)
    bwd = (cp - 1) * max(0.0, bwd_step - attention_s[1] / cp)
    return fwd, bwd
