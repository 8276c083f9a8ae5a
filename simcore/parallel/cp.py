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
queries against all keys), so each of the ``cp`` steps holds ``1/cp`` of the rank's attention.

How the blocks travel (:data:`RING_ROTATES`, :func:`ring_comm_exposed_s`) is the implementation's:
``p2p``, Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (Megatron-Core's ``p2p`` ``cp_comm_type``),
sends each step's key/value block to the next rank while the step computes (backward: the block
and its gradients). torch's ``context_parallel`` (torch/distributed/tensor/experimental/_attention.py,
``_templated_ring_attention`` and ``_templated_ring_attention_backward``; torchtitan 9dec370's
``--experimental.context_parallel_rotate_method`` defaults to ``allgather``, config_manager.py)
rotates with ``_AllGatherRotater`` by default (``_ContextParallelOptions.rotate_method``): one
all-gather of every rank's key/value block issued at step 0 and waited at step 1, so only step
0's attention (``1/cp`` of it) hides it, and all later steps read the gathered buffer. Its backward
gathers the keys/values the same way and passes the key/value *gradients* round the ring with
``_AllToAllRotater`` (``ft_c.permute_tensor``) in the accumulators' dtype, fp32 under
``convert_to_f32=True`` (``accum_dtype``): each step's gradients are sent after its kernel and
waited after the next step's, and the last hop, issued at the last step, is waited after the loop
with no attention left to hide it. ``alltoall`` (``_AllToAllRotater`` for the keys/values too)
permutes the block every step; its backward's key/value and gradient permutes run on the same
process group, one NCCL stream, so a step hides both.

Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509, sec. 3.1): an all-to-all
turns the sequence split into a head split before attention (queries, keys and values) and one
turns it back after (the output); backward does the same two. Not overlapped.

Ring attention's own memory-bound kernels (:func:`ring_merge_bytes`) run on the compute stream
between the per-step attention kernels and cannot hide behind them: each step's partial output is
merged into the running one by an online-softmax correction in fp32, the key/value blocks are
concatenated for the send, and backward accumulates the query, key and value gradients in fp32.
Their bytes move at the compute model's streaming bandwidth, counted from the code of the two
implementations (``ParallelOptions.ring_merge``): ``eager``, torch's ``context_parallel`` (what
torchtitan runs: ``_templated_ring_attention``, ``_SDPAMerger``, ``_templated_ring_attention_backward``
with ``_cp_options`` ``convert_to_f32=True``, ``enable_load_balance=True``, torch 2.6,
``torch/distributed/tensor/experimental/_attention.py``): unfused fp32 merges and accumulations; and
``fused``, Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (Megatron-Core's ``p2p``
``cp_comm_type``): one jit-fused correction ``out.add_(out_i * exp(lse_i - lse))`` per step and the
gradients added in the inputs' dtype (``dq.add_(dq_)``, ``dkv.add_``).

Kernel rates (:func:`ring_kernel_factors`, ``simcore/data/context_parallel.yaml``): of a rank's
``cp`` equal-FLOP attention kernels only step 0's is causal; the others are non-causal and run at
FlashAttention-2's non-causal plateau, above the causal one the compute model prices a layer at.

Grouped-query attention: the key/value heads that travel and merge are the model's ``kv_heads``
when the attention takes them grouped (Transformer Engine's ``num_gqa_groups``; ``ring_kv:
grouped``), or the query heads when the model repeats them before attention (``repeated``):
torchtitan's llama (9dec370, ``torchtitan/models/llama/model.py``) calls ``repeat_kv`` on keys
and values before ``F.scaled_dot_product_attention``, so torch's ring moves and concatenates
``heads / kv_heads`` times the bytes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.parallel.shard import ShardSpec, layer_role
from simcore.workload.types import Layer, TransformerDims

__all__ = [
    "RING_KV",
    "RING_MERGES",
    "RING_ROTATES",
    "context_parallel_exposed_s",
    "ring_comm_exposed_s",
    "ring_kernel_extra_s",
    "ring_kernel_factors",
    "ring_merge_bytes",
]

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
    memory_bandwidth_Bps: float | None = None,
    merge: str = "fused",
    kv: str = "grouped",
    rotate: str | None = None,
) -> tuple[float, float]:
    """Exposed (forward, backward) seconds context parallelism adds to ``layer``: its communication
    not hidden behind the attention (:func:`ring_comm_exposed_s`) and, given
    ``memory_bandwidth_Bps``, ring attention's merge and accumulation kernels
    (:func:`ring_merge_bytes` of implementation ``merge``) at that bandwidth.

    ``attention_s`` is this rank's attention compute (forward, backward) for the micro-batch;
    ``price(op, bytes)`` prices a collective over the context-parallel group; ``kv`` which key/value
    heads move (:data:`RING_KV`); ``rotate`` how the blocks travel (:data:`RING_ROTATES`; ``None``:
    the implementation's default, ``allgather`` for torch's ``eager`` merge, ``p2p`` for Transformer
    Engine's ``fused`` one). The key/value gradients travel in fp32 with the ``eager`` merge (torch's
    fp32 accumulators), in the inputs' dtype with the ``fused`` one.
    """
    cp = spec.cp
    if cp == 1 or layer_role(layer) != "split" or not layer.name.endswith("attn_core"):
        return 0.0, 0.0
    tokens = micro_batch * dims.seq_len / cp
    kv_width = 2 * _ring_kv_heads(dims, kv) * dims.head_dim / spec.tp
    if kind == "ulysses":
        qkv = tokens * (dims.hidden / spec.tp + kv_width) * elem
        out = tokens * dims.hidden / spec.tp * elem
        each_way = price("all_to_all", qkv) + price("all_to_all", out)
        return each_way, each_way
    block = tokens * kv_width * elem
    if merge not in RING_MERGES:
        raise TrainsimError(f"ring merge {merge!r} unknown; allowed: {', '.join(RING_MERGES)}")
    grads = block * (_FP32_BYTES / elem if merge == "eager" else 1.0)
    method = rotate if rotate is not None else ("allgather" if merge == "eager" else "p2p")
    fwd, bwd = ring_comm_exposed_s(cp, block, grads, attention_s, price, rotate=method)
    if memory_bandwidth_Bps:
        merge_fwd, merge_bwd = ring_merge_bytes(
            dims, spec, micro_batch=micro_batch, elem=elem, merge=merge, kv=kv
        )
        fwd += merge_fwd / memory_bandwidth_Bps
        bwd += merge_bwd / memory_bandwidth_Bps
    return fwd, bwd


RING_MERGES = ("fused", "eager")
RING_KV = ("grouped", "repeated")
RING_ROTATES = ("p2p", "allgather", "alltoall")
_FP32_BYTES = 4.0  # torch's ring accumulates the query/key/value gradients in float32


def ring_comm_exposed_s(
    cp: int,
    block: float,
    grads: float,
    attention_s: tuple[float, float],
    price: Price,
    *,
    rotate: str = "p2p",
) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of ring attention's key/value traffic on one rank.

    ``block``: bytes of one rank's keys and values; ``grads``: bytes of their gradients as sent;
    ``attention_s``: the rank's attention (forward, backward), of which each of the ``cp`` steps
    holds ``1/cp`` (the round-robin split). With ``a`` one step's share:

    - ``p2p``: ``cp - 1`` hops of ``block`` forward and of ``block`` plus its gradients (as many
      bytes) backward, each exposing what it exceeds ``a``;
    - ``allgather``: forward one all-gather of ``cp`` blocks exposing what it exceeds step 0's ``a``;
      backward the same all-gather against its ``a``, ``cp - 1`` gradient hops of ``grads`` each
      hidden behind the next step's ``a``, and the last hop whole;
    - ``alltoall``: ``cp - 1`` permutes of ``block`` forward; backward ``cp - 1`` steps each hiding
      a permute of ``block`` and one of ``grads`` (one stream), and the last gradient hop whole.
    """
    if rotate not in RING_ROTATES:
        raise TrainsimError(f"ring rotation {rotate!r} unknown; allowed: {', '.join(RING_ROTATES)}")
    fwd_a, bwd_a = attention_s[0] / cp, attention_s[1] / cp
    if rotate == "p2p":
        fwd = (cp - 1) * max(0.0, price("send_recv", block) - fwd_a)
        return fwd, (cp - 1) * max(0.0, price("send_recv", 2.0 * block) - bwd_a)
    hop = price("send_recv", grads)
    if rotate == "allgather":
        gather = price("all_gather", cp * block)
        fwd = max(0.0, gather - fwd_a)
        return fwd, max(0.0, gather - bwd_a) + (cp - 1) * max(0.0, hop - bwd_a) + hop
    send = price("send_recv", block)
    fwd = (cp - 1) * max(0.0, send - fwd_a)
    return fwd, (cp - 1) * max(0.0, send + hop - bwd_a) + hop


def _ring_kv_heads(dims: TransformerDims, kv: str) -> int:
    """Key/value heads ring attention moves: the model's (``grouped``) or the query heads (``repeated``)."""
    if kv not in RING_KV:
        raise TrainsimError(f"ring kv {kv!r} unknown; allowed: {', '.join(RING_KV)}")
    return dims.heads if kv == "repeated" else dims.kv_heads


def ring_merge_bytes(
    dims: TransformerDims,
    spec: ShardSpec,
    *,
    micro_batch: int,
    elem: int,
    merge: str = "fused",
    kv: str = "grouped",
) -> tuple[float, float]:
    """(forward, backward) bytes of ring attention's memory-bound kernels per layer and micro-batch
    on the busiest rank, the last of the ring, whose every step after the first computes and merges
    a full-size output (the others do half of it in some steps).

    With ``Q`` query (= output) and ``KV`` key elements per rank, ``e`` bytes per element and ``cp``
    steps: ``fused`` (Transformer Engine) zeroes the output (e Q), corrects it every step in one
    kernel (read it and the step's output, write it: 3e Q), and from the second step copies the
    first half of the received keys and values contiguous (2e KV); backward adds the query and
    key/value gradients each step in the inputs' dtype (3e Q + 3e 2KV) with the same half copies.
    ``eager`` (torch) see :func:`_eager_merge_bytes`.
    """
    if merge not in RING_MERGES:
        raise TrainsimError(f"ring merge {merge!r} unknown; allowed: {', '.join(RING_MERGES)}")
    cp, e = spec.cp, float(elem)
    tokens = micro_batch * dims.seq_len / cp
    q = tokens * dims.heads * dims.head_dim / spec.tp
    k = tokens * _ring_kv_heads(dims, kv) * dims.head_dim / spec.tp
    if merge == "eager":
        return _eager_merge_bytes(cp, e, q, k)
    halves = (cp - 1) * 2 * e * k
    return e * q + cp * 3 * e * q + halves, cp * 3 * e * (q + 2 * k) + halves


def _eager_merge_bytes(cp: int, e: float, q: float, kv: float) -> tuple[float, float]:
    """torch's ``context_parallel``: forward ``key/value.contiguous()`` (the heads transposed: 2 KV
    read and written), per step but the last ``torch.cat`` of key and value for the send (2 KV, read
    and written), the first output upcast to fp32 (e + 4 per element) and each later step's merge
    ``out - sigmoid(lse_i - lse) * (out - out_i)`` after the upcast of ``out_i``: (e + 4) + 12 + 8 +
    12 = 36 + e bytes per element, then the result cast back (4 + e). Backward: fp32 zeros for the
    three gradients (4 Q + 8 KV), per step the ``torch.cat`` of key and value (but the last), the
    key/value gradient added in fp32 (8 + e per element; after the first step into half of it, then
    the whole re-concatenated: + 8 each), their fp32 concatenation for the send (16 per key/value
    pair element), the query gradient added in fp32 (8 + e), and at the end both cast back (4 + e)."""
    steps = cp - 1
    fwd = 2 * kv * 2 * e + steps * 2 * kv * 2 * e + (e + 4) * q + steps * (36 + e) * q + (4 + e) * q
    bwd = (
        4 * q
        + 8 * kv
        + steps * 2 * kv * 2 * e
        + 2 * kv * (8 + e)
        + steps * 2 * kv * ((8 + e) / 2 + 8)
        + cp * 16 * kv
        + cp * (8 + e) * q
        + (4 + e) * (q + 2 * kv)
    )
    return fwd, bwd


def ring_kernel_factors(device_name: str, cp: int) -> tuple[float, float]:
    """(forward, backward) time of a rank's ring attention kernels over the compute model's price
    of them as one causal kernel: step 0 causal, the other ``cp - 1`` of the ``cp`` equal-FLOP steps
    non-causal, ``1/cp + (cp - 1)/cp x causal / full`` with the plateaus of
    ``simcore/data/context_parallel.yaml`` for ``device_name`` (1.0 for a part it does not list)."""
    if cp < 1:
        raise TrainsimError(f"context-parallel degree must be >= 1, got {cp}")
    entry = _kernel_plateaus(device_name)
    if entry is None or cp == 1:
        return 1.0, 1.0
    causal, full = entry
    return tuple(1.0 / cp + (cp - 1) / cp * c / f for c, f in zip(causal, full, strict=True))  # type: ignore[return-value]


def ring_kernel_extra_s(
    layer: Layer, spec: ShardSpec, *, kind: str, attention_s: tuple[float, float], device_name: str
) -> tuple[float, float]:
    """(forward, backward) seconds ring attention's kernel rates add to ``layer``'s attention
    ``attention_s`` as the compute model priced it (negative: the non-causal steps run faster;
    :func:`ring_kernel_factors`); nothing for Ulysses (one causal kernel over all the tokens of
    the rank's heads), without context parallelism or on another layer."""
    if spec.cp == 1 or kind != "ring" or layer_role(layer) != "split" or not layer.name.endswith("attn_core"):
        return 0.0, 0.0
    kf, kb = ring_kernel_factors(device_name, spec.cp)
    return attention_s[0] * (kf - 1.0), attention_s[1] * (kb - 1.0)


def _kernel_plateaus(device_name: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The (causal, full) [forward, backward] plateaus context_parallel.yaml gives ``device_name``."""
    table = data_file("context_parallel.yaml")
    for pattern, entry in (table.get("devices") or {}).items():
        if fnmatch.fnmatchcase(device_name, pattern):
            pairs = []
            for key in ("causal", "full"):
                value = entry.get(key)
                if not (
                    isinstance(value, list)
                    and len(value) == 2
                    and all(isinstance(v, int | float) and 0 < v <= 1 for v in value)
                ):
                    raise TrainsimError(
                        f"context_parallel.yaml devices.{pattern}.{key}: expected [forward, backward] "
                        f"fractions in (0, 1], got {value!r}"
                    )
                pairs.append((float(value[0]), float(value[1])))
            return pairs[0], pairs[1]
    return None
