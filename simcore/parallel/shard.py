"""What one rank of a tensor/context/expert-parallel group computes and keeps of each layer.

Megatron-style tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", sec. 3; Korthikanti et al.
2022, arXiv 2205.05198, sec. 4) splits a transformer layer by the *role* of each operator, read from
the layer name's suffix (:mod:`simcore.workload.models.transformer` names them):

- column-parallel linears (``attn_qkv``, ``mlp_in``, ``shared_in``): weight split by output
  columns; the input is the full hidden state (replicated across TP ranks);
- row-parallel linears (``attn_out``, ``mlp_out``, ``shared_out``): weight split by input rows, the
  output is a partial sum (all-reduced, or reduce-scattered with sequence parallelism); its bias and
  the dropout mask after it are replicated;
- split operators (``attn_core`` by heads, ``*_act`` by ffn columns): everything divided by ``tp``;
- replicated operators (norms, the MoE router, a pooler): every TP rank does all of it, unless
  sequence parallelism splits them along the sequence (then ``1/tp`` each);
- ``embed`` is vocab-parallel (the token table split by rows; position/segment tables replicated),
  ``lm_head`` column-parallel over the vocabulary (its fp32 loss logits split too);
- routed experts (``experts_in``/``_act``/``_out``) are split by expert parallelism (``experts/ep``
  experts per rank) and, inside an expert, by tensor parallelism like a dense feed-forward (Megatron-
  Core's default expert tensor-parallel size is ``tp``); the busiest expert rank sees ``expert_load``
  times the mean tokens.

Context parallelism splits every token-proportional figure (FLOPs, saved activations, bytes moved)
by ``cp``; with causal load balancing each rank's share of the attention work is also ``1/cp``.
Activation bytes follow the paper's accounting: without sequence parallelism the per-layer
``sbh(34 + 5as/h)`` becomes ``sbh(10 + 24/t + 5as/(ht))``, with it ``sbh(34 + 5as/h)/t`` (eq. 2-4).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simcore.workload.models.transformer import LOSS_BYTES_PER_LOGIT
from simcore.workload.types import Layer, TransformerDims

__all__ = ["ROLES", "TP_SAVED_INPUTS", "ShardSpec", "layer_role", "param_split", "shard_layer"]

# What a column-parallel linear saves of a sequence-parallel input. ``shard``: Megatron-LM's
# LinearWithGradAccumulationAndAsyncCommunication all-gathers the sequence shards for the GEMM but
# saves its own shard (``ctx.save_for_backward(input, weight)``) and all-gathers it again in backward
# (Korthikanti et al. 2022, sec. 4.2.2). ``gathered``: torch's DTensor tensor parallelism as
# torchtitan applies it (torchtitan 9dec370 torchtitan/parallelisms/parallelize_llama.py apply_tp:
# PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate()) on ``attention`` and
# ``feed_forward``, ColwiseParallel on wq/wk/wv, w1/w3 and ``output`` with input_layouts Shard(1)):
# the input is redistributed to Replicate before the linears, and autograd saves the tensor the GEMM
# read, the whole sequence (one tensor shared by the linears of the module).
TP_SAVED_INPUTS = ("shard", "gathered")

ROLES: dict[str, str] = {
    "norm1": "replicated",
    "norm2": "replicated",
    "final_norm": "replicated",
    "embed_norm": "replicated",
    "pooler": "replicated",
    "moe_router": "replicated",
    "attn_qkv": "column",
    "mlp_in": "column",
    "shared_in": "column",
    "attn_core": "split",
    "mlp_act": "split",
    "shared_act": "split",
    "attn_out": "row",
    "mlp_out": "row",
    "shared_out": "row",
    "experts_in": "expert_column",
    "experts_act": "expert_split",
    "experts_out": "expert_row",
    "rotary": "split",  # per attention head, so split with the heads
    "embed": "vocab_embedding",
    "lm_head": "vocab_head",
    "loss": "split",  # Megatron's vocab-parallel cross entropy: each rank its slice of the logits
}


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """How a layer is split: tensor, context and expert degrees, sequence parallelism, expert load."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    expert_load: float = 1.0  # tokens on the busiest expert rank / the mean (>= 1; only with ep > 1)
    # what a column-parallel linear (and the vocabulary head) saves of its sequence-parallel input
    # (TP_SAVED_INPUTS): ``shard`` (Megatron: its sequence shard, all-gathered again in backward) or
    # ``gathered`` (torch DTensor TP: the all-gathered input the GEMM ran on)
    saved_input: str = "shard"

    @property
    def replicated_share(self) -> float:
        """The share of a replicated operator one TP rank does: all, or 1/tp along the sequence."""
        return 1.0 / self.tp if self.sequence_parallel else 1.0

    @property
    def load(self) -> float:
        return self.expert_load if self.ep > 1 else 1.0

    @property
    def column_input_share(self) -> float:
        """The share of a column-parallel linear's full input one TP rank saves for backward."""
        return 1.0 if self.saved_input == "gathered" else self.replicated_share


def layer_role(layer: Layer) -> str:
    """The tensor-parallel role of ``layer`` from its name (``"replicated"`` when unknown)."""
    return ROLES.get(layer.name.rsplit(".", 1)[-1], "replicated")


def param_split(layer: Layer, dims: TransformerDims, spec: ShardSpec) -> tuple[float, float]:
    """(parameters split over the layer's shards, parameters every TP rank holds whole).

    One rank holds ``split / shards + whole`` with ``shards`` = tp (x ep for routed experts).
    """
    role = layer_role(layer)
    params = float(layer.params)
    if role in ("column", "split", "vocab_head"):
        return params, 0.0
    if role == "row":
        bias = float(dims.hidden) if dims.bias and params else 0.0
        return params - bias, bias
    if role == "vocab_embedding":
        table = float(dims.vocab * dims.hidden)
        return table, params - table
    if role.startswith("expert"):
        return params, 0.0
    return 0.0, params


def _param_shards(role: str, spec: ShardSpec) -> int:
    return spec.tp * spec.ep if role.startswith("expert") else spec.tp


def _activation_share(layer: Layer, role: str, dims: TransformerDims, spec: ShardSpec, elem: int) -> float:
    """Saved bytes per sample on one rank, before the context split."""
    rep, tp, load = spec.replicated_share, spec.tp, spec.load
    saved = layer.activation_bytes
    if role == "column":
        return saved * spec.column_input_share
    if role in ("replicated", "vocab_embedding"):
        return saved * rep
    if role == "expert_column":
        return saved * rep * load
    if role == "split":
        return saved / tp
    if role == "expert_split":
        return saved / tp * load
    if role in ("row", "expert_row"):
        mask = layer.output_bytes / elem if dims.dropout else 0.0
        factor = load if role == "expert_row" else 1.0
        return (saved - mask) / tp * factor + mask * rep
    # vocab_head: the saved input is a column linear's, the fp32 loss logits are split over the vocabulary
    logits = LOSS_BYTES_PER_LOGIT * dims.seq_len * dims.vocab
    return (saved - logits) * spec.column_input_share + logits / tp


def _work_share(role: str, spec: ShardSpec) -> float:
    """The share of a layer's FLOPs and streamed bytes one TP rank does, before the context split."""
    if role in ("column", "row", "split", "vocab_head"):
        return 1.0 / spec.tp
    if role.startswith("expert"):
        return spec.load / spec.tp
    return spec.replicated_share


def _output_share(role: str, spec: ShardSpec) -> float:
    """The share of a layer's output one rank holds (what flows to the next layer or stage)."""
    if role in ("column", "split", "vocab_head", "expert_column", "expert_split"):
        return 1.0 / spec.tp
    return spec.replicated_share


def shard_layer(layer: Layer, dims: TransformerDims, spec: ShardSpec, elem: int) -> Layer:
    """The part of ``layer`` one rank computes and keeps (per sample); ``elem`` = bytes per element."""
    role = layer_role(layer)
    split, whole = param_split(layer, dims, spec)
    work = _work_share(role, spec) / spec.cp
    return replace(
        layer,
        params=round(split / _param_shards(role, spec) + whole),
        fwd_flops=layer.fwd_flops * work,
        bwd_flops=layer.bwd_flops * work,
        activation_bytes=_activation_share(layer, role, dims, spec, elem) / spec.cp,
        output_bytes=layer.output_bytes * _output_share(role, spec) / spec.cp,
        memory_bytes=layer.memory_bytes * work,
    )
