"""Tensor-parallel collectives of each layer (Megatron-LM), per micro-batch.

Without sequence parallelism (Shoeybi et al. 2019, sec. 3, Figure 3): the ``f``/``g`` operators
of every attention and MLP block put one all-reduce of the block's output in forward (after the
row-parallel linear) and one in backward (the input gradient of the column-parallel linear): two
each way per transformer layer. With sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2)
each all-reduce becomes a reduce-scatter, and an all-gather appears where the replicated region
ends: forward all-gather before a column-parallel linear and reduce-scatter after a row-parallel
one, the reverse in backward; the same bytes move (an all-reduce is a reduce-scatter plus an
all-gather). Megatron-LM also re-gathers the column-parallel input in backward for the weight
gradient, overlapped with the input-gradient GEMM: not on the critical path, not counted.

The vocabulary-parallel embedding all-reduces (reduce-scatters) its output in forward; the
vocabulary-parallel output layer gathers its input (with sequence parallelism), all-reduces the
cross-entropy's per-token max, sum and target logit (three fp32 values per token), and
all-reduces (reduce-scatters) its input gradient in backward. Routed experts with expert tensor
parallelism behave like a dense feed-forward on their ``top_k`` token copies.

Sizes are nccl-tests sizes (the full buffer: ``micro_batch x tokens x hidden x bytes``); every
collective is on the critical path (Megatron runs them synchronously unless its
``--tp-comm-overlap`` userbuffers are on).
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.parallel.shard import ShardSpec, layer_role
from simcore.workload.types import Layer, TransformerDims

__all__ = ["LayerCollective", "tensor_parallel_collectives"]


@dataclass(frozen=True, slots=True)
class LayerCollective:
    """One collective a layer runs per micro-batch: in which pass, which op, how many bytes."""

    phase: str  # "fwd" or "bwd"
    op: str
    size_bytes: float


def tensor_parallel_collectives(
    layer: Layer, dims: TransformerDims, spec: ShardSpec, micro_batch: int, elem: int
) -> list[LayerCollective]:
    """The TP collectives of one (unsharded) ``layer`` for a micro-batch on one rank."""
    if spec.tp == 1:
        return []
    role = layer_role(layer)
    sp = spec.sequence_parallel
    hidden = micro_batch * dims.seq_len * dims.hidden * elem / spec.cp  # one hidden state per rank
    reduce_op = "reduce_scatter" if sp else "all_reduce"
    if role.startswith("expert") and dims.moe is not None:
        hidden *= dims.moe.top_k * spec.load  # the routed token copies this rank's experts see
    if role in ("row", "expert_row"):
        back = [LayerCollective("bwd", "all_gather", hidden)] if sp else []
        return [LayerCollective("fwd", reduce_op, hidden), *back]
    if role in ("column", "expert_column"):
        gather = [LayerCollective("fwd", "all_gather", hidden)] if sp else []
        return [*gather, LayerCollective("bwd", reduce_op, hidden)]
    if role == "vocab_embedding":
        return [LayerCollective("fwd", reduce_op, hidden)]
    if role == "vocab_head":
        stats = micro_batch * dims.seq_len / spec.cp * 3 * 4.0
        return ([LayerCollective("fwd", "all_gather", hidden)] if sp else []) + [
            LayerCollective("fwd", "all_reduce", stats),
            LayerCollective("bwd", reduce_op, hidden),
        ]
    return []
