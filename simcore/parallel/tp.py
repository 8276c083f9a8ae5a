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

**FP8 all-gathers** (torchao's float8 tensor parallelism, which torchtitan's ``apply_tp`` uses for
float8 linears: ``Float8ColwiseParallel``, ``Float8RowwiseParallel``, ``PrepareFloat8ModuleInput``
in ``torchao/float8/float8_tensor_parallel.py``): the input is cast to float8 before the
sequence-parallel all-gather of a column-parallel linear, and a row-parallel linear's output
gradient is cast to float8 (``NoopFwToFloat8BwDynamic``) before the all-gather that is the
backward of its reduce-scatter; the reduce-scatters stay in the activations' dtype. The recipe
says whether its TP gathers are fp8 (``tp_fp8_all_gather``, ``simcore/data/fp8.yaml``).

The vocabulary-parallel embedding all-reduces (reduce-scatters) its output in forward; the
vocabulary-parallel output layer gathers its input (with sequence parallelism), all-reduces the
cross-entropy's per-token max, sum and target logit (three fp32 values per token), and
all-reduces (reduce-scatters) its input gradient in backward. Routed experts with expert tensor
parallelism behave like a dense feed-forward on their ``top_k`` token copies.

Sizes are nccl-tests sizes (the full buffer: ``micro_batch x tokens x hidden x bytes``); every
collective is on the critical path (Megatron runs them synchronously unless its
``--tp-comm-overlap`` userbuffers are on).

**Overlap** (``--tp-comm-overlap``: Megatron-LM's ``--tp-comm-overlap`` with Transformer Engine
userbuffers; torch's async TP, ``torch._inductor.config._micro_pipeline_tp``, torchtitan's
``enable_async_tensor_parallel``). Both need sequence parallelism (Megatron-LM refuses the flag
without it): the all-gather before a column-parallel linear and the reduce-scatter after a
row-parallel one are decomposed into ``tp - 1`` point-to-point steps, and the GEMM into ``tp``
chunks, one per shard, each chunk starting when its shard has arrived (the local shard at once).
A two-stage pipeline of ``tp - 1`` transfers of ``C / (tp - 1)`` and ``tp`` GEMM chunks of
``G / tp`` ends at ``max(G, C + G / tp)``, so the exposed communication is
``max(0, C - G (tp - 1) / tp)`` (:func:`overlapped_exposed_s`; the reduce-scatter is the mirror
image). The transfers run on copy engines (torch async TP's symmetric-memory p2p and TE's
ring-exchange both use ``cudaMemcpyAsync`` peer copies), so the GEMM keeps its SMs; the share of
the GEMM that hides a transfer is ``hide_fraction`` in ``simcore/data/tp_overlap.yaml`` (with its
source). In backward Megatron overlaps the input-gradient reduce-scatter of a column-parallel linear
with its weight-gradient GEMM in bulk (one transfer beside the whole GEMM, ``ub_bulk_dgrad`` /
``ub_bulk_wgrad``), and the output-gradient all-gather of a row-parallel linear pipelined with its
data-gradient GEMM; each is half the layer's backward (the two GEMMs of a linear's backward have the
same FLOPs). The embedding, the output head and routed experts keep their collectives exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.parallel.shard import ShardSpec, layer_role
from simcore.workload.types import Layer, TransformerDims

__all__ = [
    "LayerCollective",
    "hide_fraction",
    "overlapped_exposed_s",
    "tensor_parallel_collectives",
]

# How an overlapped collective meets its GEMM (see the module docstring): "chunked" pipelines it
# with the GEMM's chunks, "bulk" runs it beside the whole GEMM; "" is not overlapped.
OVERLAP_KINDS = ("", "chunked", "bulk")


@dataclass(frozen=True, slots=True)
class LayerCollective:
    """One collective a layer runs per micro-batch: in which pass, which op, how many bytes, and
    (with ``--tp-comm-overlap``) how it overlaps the layer's GEMM and which share of the pass's
    compute time that GEMM is."""

    phase: str  # "fwd" or "bwd"
    op: str
    size_bytes: float
    overlap: str = ""  # one of OVERLAP_KINDS
    gemm_share: float = 1.0  # the overlapped GEMM's share of the layer's time in ``phase``


def hide_fraction() -> float:
    """The share of an overlapping GEMM's time during which a transfer proceeds (the data file's)."""
    entry = data_file("tp_overlap.yaml")
    value = entry.get("hide_fraction") if isinstance(entry, dict) else None
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise TrainsimError(f"tp_overlap.yaml: hide_fraction must be a number in [0, 1], got {value!r}")
    return float(value)


def overlapped_exposed_s(comm_s: float, gemm_s: float, kind: str, tp: int, hide: float) -> float:
    """Exposed seconds of a collective of ``comm_s`` overlapped (``kind``) with a GEMM of ``gemm_s``
    over ``tp`` ranks: ``max(0, C - hide x G (tp - 1) / tp)`` chunked, ``max(0, C - hide x G)`` in bulk."""
    if kind == "chunked":
        return max(0.0, comm_s - hide * gemm_s * (tp - 1) / tp)
    if kind == "bulk":
        return max(0.0, comm_s - hide * gemm_s)
    return comm_s


def tensor_parallel_collectives(
    layer: Layer,
    dims: TransformerDims,
    spec: ShardSpec,
    micro_batch: int,
    elem: int,
    *,
    overlap: bool = False,
    gather_elem: float | None = None,
) -> list[LayerCollective]:
    """The TP collectives of one (unsharded) ``layer`` for a micro-batch on one rank (``overlap``:
    ``--tp-comm-overlap``, which marks the dense linears' sequence-parallel collectives;
    ``gather_elem``: bytes per element of a dense linear's sequence-parallel all-gathers, the
    column input's in forward and the row output gradient's in backward, when not ``elem``)."""
    if spec.tp == 1:
        return []
    role = layer_role(layer)
    sp = spec.sequence_parallel
    hidden = micro_batch * dims.seq_len * dims.hidden * elem / spec.cp  # one hidden state per rank
    gathered = hidden * (gather_elem / elem) if gather_elem and role in ("row", "column") else hidden
    reduce_op = "reduce_scatter" if sp else "all_reduce"
    if role.startswith("expert") and dims.moe is not None:
        hidden *= dims.moe.top_k * spec.load  # the routed token copies this rank's experts see
    dense = role in ("row", "column") and sp and overlap
    if role in ("row", "expert_row"):
        back = [LayerCollective("bwd", "all_gather", gathered, "chunked" if dense else "", 0.5)] if sp else []
        return [LayerCollective("fwd", reduce_op, hidden, "chunked" if dense else ""), *back]
    if role in ("column", "expert_column"):
        gather = [LayerCollective("fwd", "all_gather", gathered, "chunked" if dense else "")] if sp else []
        return [*gather, LayerCollective("bwd", reduce_op, hidden, "bulk" if dense else "", 0.5)]
    if role == "vocab_embedding":
        return [LayerCollective("fwd", reduce_op, hidden)]
    if role == "vocab_head":
        stats = micro_batch * dims.seq_len / spec.cp * 3 * 4.0
        return ([LayerCollective("fwd", "all_gather", hidden)] if sp else []) + [
            LayerCollective("fwd", "all_reduce", stats),
            LayerCollective("bwd", reduce_op, hidden),
        ]
    return []
