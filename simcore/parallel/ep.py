"""Expert-parallel communication of one MoE layer, per micro-batch (GShard, Lepikhin et al. 2020;
Megatron-Core's all-to-all token dispatcher).

Each rank of an expert-parallel group sends every one of its tokens' ``top_k`` copies to the rank
holding the chosen expert (dispatch, an all-to-all before the experts) and gets the results back
(combine, an all-to-all after them); backward runs the two in reverse. A rank's buffer is
``tokens x top_k x hidden`` elements, its tokens being ``micro_batch x seq_len / cp``, split over
the tensor-parallel ranks (Megatron-Core requires sequence parallelism when experts and tensor
parallelism are combined). The busiest rank receives ``expert_load`` times the mean, and the
collective ends when it does. The all-to-alls are on the critical path (no overlap), as in
Megatron-Core's default dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.parallel.shard import ShardSpec
from simcore.workload.types import Layer, TransformerDims

__all__ = ["expert_parallel_exposed_s", "token_buffer_bytes"]

Price = Callable[[str, float], float]


def token_buffer_bytes(dims: TransformerDims, spec: ShardSpec, micro_batch: int, elem: int) -> float:
    """Bytes one rank sends in one dispatch (or combine) all-to-all."""
    if dims.moe is None:
        return 0.0
    tokens = micro_batch * dims.seq_len / spec.cp / spec.tp
    return tokens * dims.moe.top_k * dims.hidden * elem * spec.load


def expert_parallel_exposed_s(
    layer: Layer, dims: TransformerDims, spec: ShardSpec, *, micro_batch: int, elem: int, price: Price
) -> tuple[float, float]:
    """Exposed (forward, backward) seconds: dispatch on ``experts_in``, combine on ``experts_out``."""
    if spec.ep == 1 or not layer.name.endswith(("experts_in", "experts_out")):
        return 0.0, 0.0
    seconds = price("all_to_all", token_buffer_bytes(dims, spec, micro_batch, elem))
    return seconds, seconds
