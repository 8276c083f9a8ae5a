"""What one training step computes: layers grouped into blocks, with parameters, FLOPs and bytes.

A :class:`Workload` is an ordered tuple of :class:`Layer` records (one record per operator: a
matmul, a norm, a convolution ...). Every per-layer figure is *per sample* (one sequence for a
language model, one image for a vision model) so a strategy scales it by its micro-batch.
Layers belong to blocks (a transformer block, a CNN residual block or stage): the natural units
for FSDP wrapping; embeddings, stems and heads sit outside blocks (``block == -1``).

:func:`load_workload` accepts a preset name (:func:`preset_names`), the path of a shape file
(YAML/JSON, see :func:`simcore.workload.shapefile.load_shape_file`) or ``"module:factory"`` naming a Python
callable that returns a ``torch.nn.Module`` (imported on the meta device, see
:mod:`simcore.workload.torch_import`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError

__all__ = ["Layer", "MLADims", "MoEDims", "ParameterTie", "TransformerDims", "Workload"]


@dataclass(frozen=True, slots=True)
class Layer:
    """One operator of the model; all figures are per sample at the workload's dtype."""

    name: str
    kind: str  # "embedding", "linear", "attention", "norm", "activation", "conv", "pool", ...
    block: int  # index into Workload.block_names; -1 = outside every block
    params: int
    fwd_flops: float  # forward FLOPs per sample (a multiply-add counts as 2)
    bwd_flops: float  # backward FLOPs per sample (2x forward for matmuls: input and weight gradients)
    activation_bytes: float  # bytes per sample saved in forward for backward
    output_bytes: float  # bytes per sample of the tensor handed to the next layer
    memory_bytes: float  # bytes per sample read and written in forward, weights excluded (roofline)
    # The forward GEMM's shape per sample, (m, k, n): an (m x k) by (k x n) product (m rows per sample:
    # tokens of a sequence, output positions of a convolution); None when unknown. The compute model
    # derives the data-gradient (m x n by n x k) and weight-gradient (k x m by m x n) GEMMs from it.
    gemm: tuple[float, float, float] | None = None
    # Backward's bytes over the forward's ``memory_bytes`` (2: every tensor read and written again, the
    # roofline's rule); eager attention states its own count (simcore/workload/models/transformer.py).
    bwd_bytes_ratio: float = 2.0
    # (forward, backward) share of that phase's activation bytes moved by memory-bound kernels that run
    # between the layer's GEMMs (eager attention's scale, mask, softmax, dropout and layout copies):
    # they add to the GEMMs' time instead of hiding under it. 0: one kernel, max(compute, bytes).
    serial_fraction: tuple[float, float] = (0.0, 0.0)
    # (forward, backward) host synchronisations per call of the layer, whatever the batch: a blocking
    # host-to-device copy of a Python scalar (``torch.tensor(x, device=...)``) or a CUDA tensor read in
    # a Python ``if`` drains the queue; priced per call by :mod:`simcore.compute.host_syncs`
    host_syncs: tuple[float, float] = (0.0, 0.0)

    @property
    def is_flop_free(self) -> bool:
        """True for operators without matmul FLOPs (norms, activations, pools): memory-bandwidth bound."""
        return self.fwd_flops == 0.0


@dataclass(frozen=True, slots=True)
class ParameterTie:
    """One parameter tensor shared by several layers (GPT-2's token embedding and output head).

    ``layers`` are the indices of the layers that use it; its ``params`` are counted once, in the
    ``params`` of one of them. Backward produces one partial gradient per use, and autograd keeps
    them until the last use's backward, then sums them into a new tensor: ``len(layers)`` partials
    plus their sum are alive together for a moment (:mod:`simcore.strategies.passes`).
    """

    params: int
    layers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MoEDims:
    """The mixture-of-experts feed-forward of a transformer (Shazeer et al. 2017; Fedus et al. 2021).

    Each token is routed to ``top_k`` of ``experts`` feed-forward experts of width ``expert_ffn``;
    ``shared_experts`` more of that width see every token (DeepSeekMoE, Dai et al. 2024); the first
    ``dense_layers`` blocks keep the dense feed-forward of the transformer's ``ffn`` width. The
    router is a linear layer to ``experts`` logits, with a bias when ``router_bias`` (GPT-OSS).
    """

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0
    router_bias: bool = False

    def is_moe_block(self, block: int) -> bool:
        """Whether block ``block`` has the expert feed-forward (not one of the first dense ones)."""
        return block >= self.dense_layers


@dataclass(frozen=True, slots=True)
class MLADims:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1; DeepSeek-V3).

    Keys and values are projected down to one shared latent of ``kv_lora_rank`` (plus one rotary key
    head of ``qk_rope_head_dim`` shared by all heads), normalised, and projected up to every head's
    key (``qk_nope_head_dim``) and value (``v_head_dim``); queries likewise through a latent of
    ``q_lora_rank`` (0: one direct projection, as DeepSeek-V2-Lite). A query/key head is
    ``qk_nope_head_dim + qk_rope_head_dim`` wide.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query (and key) head: the part without and the part with rotary positions."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class TransformerDims:
    """The shape a transformer workload was built from: what model parallelism splits.

    Layer names follow :mod:`simcore.workload.models.transformer` (``block3.attn_qkv`` ...), so a
    layer's role in tensor parallelism (column- or row-parallel, replicated) is its name's suffix.
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    gated_ffn: bool
    tied_embeddings: bool
    dropout: bool
    flash_attention: bool
    bias: bool = True
    moe: MoEDims | None = None
    # the mean width of one key head and one value head when it is not hidden / heads (a separate
    # head_dim as Qwen3 and Gemma, or MLA's wider keys): 2 * kv_heads * head_dim is then the key
    # plus value width; None = hidden / heads
    head_width: int | None = None

    @property
    def head_dim(self) -> int:
        """Width of one attention head (keys and values averaged, see ``head_width``)."""
        return self.head_width or self.hidden // self.heads


@dataclass(frozen=True, slots=True)
class Workload:
    """A model as the simulator sees it: ordered layers grouped into named blocks."""

    name: str
    layers: tuple[Layer, ...]
    block_names: tuple[str, ...]
    dtype: str  # storage/activation dtype the byte figures were computed for
    tokens_per_sample: int  # sequence length for language models, 0 for vision models
    source: str  # where the architecture (and its published parameter count) comes from
    ties: tuple[ParameterTie, ...] = ()  # parameters shared by several layers
    dims: TransformerDims | None = None  # the transformer shape, when built from one
    # ranks the output logits are split over by vocabulary (a tensor-parallel rank's stage: the
    # cross entropy runs vocab-parallel, simcore.compute.memory.cross_entropy_working_bytes)
    vocab_parallel: int = 1

    def __post_init__(self) -> None:
        for tie in self.ties:
            if len(tie.layers) < 2 or any(not 0 <= i < len(self.layers) for i in tie.layers):
                raise TrainsimError(
                    f"workload {self.name!r}: a parameter tie needs two or more layer indices in "
                    f"0..{len(self.layers) - 1}, got {tie.layers}"
                )
        if self.dtype not in DTYPE_BYTES:
            raise TrainsimError(
                f"workload {self.name!r}: unknown dtype {self.dtype!r}; allowed: {sorted(DTYPE_BYTES)}"
            )
        if not self.layers:
            raise TrainsimError(f"workload {self.name!r} has no layers")
        seen_done: set[int] = set()
        current = -2
        for layer in self.layers:
            if not -1 <= layer.block < len(self.block_names):
                raise TrainsimError(f"workload {self.name!r}: layer {layer.name!r} has block {layer.block}")
            if layer.block != current:
                if layer.block in seen_done and layer.block != -1:
                    raise TrainsimError(f"workload {self.name!r}: block {layer.block} is not contiguous")
                seen_done.add(current)
                current = layer.block

    @property
    def params(self) -> int:
        """Total number of trainable parameters."""
        return sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: all of a dense model; of a mixture of experts, the
        ``top_k`` routed (and the shared) experts of each MoE block, not the idle ones."""
        moe = self.dims.moe if self.dims is not None else None
        if moe is None:
            return self.params
        idle = sum(
            layer.params * (moe.experts - moe.top_k) // moe.experts
            for layer in self.layers
            if layer.name.endswith(("experts_in", "experts_out"))
        )
        return self.params - idle

    @property
    def fwd_flops_per_sample(self) -> float:
        """Forward FLOPs of one sample through the whole model."""
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops_per_sample(self) -> float:
        """Backward FLOPs of one sample through the whole model."""
        return sum(layer.bwd_flops for layer in self.layers)

    @property
    def activation_bytes_per_sample(self) -> float:
        """Bytes saved for backward by one sample (what activation checkpointing would avoid)."""
        return sum(layer.activation_bytes for layer in self.layers)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of the workload's dtype."""
        return DTYPE_BYTES[self.dtype]

    def block_layer_indices(self) -> tuple[tuple[int, ...], ...]:
        """For each block (in ``block_names`` order), the indices of its layers in ``layers``."""
        groups: list[list[int]] = [[] for _ in self.block_names]
        for index, layer in enumerate(self.layers):
            if layer.block >= 0:
                groups[layer.block].append(index)
        return tuple(tuple(group) for group in groups)

    def blocks(self) -> tuple[tuple[Layer, ...], ...]:
        """The layers of each block, in ``block_names`` order (layers outside blocks are left out)."""
        return tuple(tuple(self.layers[i] for i in group) for group in self.block_layer_indices())

    def outside_layers(self) -> tuple[Layer, ...]:
        """Layers outside every block (embeddings, stem, head, final norm)."""
        return tuple(layer for layer in self.layers if layer.block == -1)
