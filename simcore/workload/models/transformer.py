"""Decoder/encoder transformers from their shape: parameters, FLOPs and activation bytes per operator.

FLOPs (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1; Narayanan et al.
2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", sec. 5.1):
every matmul costs 2 FLOPs per weight per token in forward, the logits ``2 * hidden * vocab`` per
token, and backward is twice forward. Attention's scores and weighted sum are ``4 * seq * hidden``
per token per layer as counted; the layers record what the kernels *execute*: FlashAttention
(Dao 2023, "FlashAttention-2") skips the blocks above the diagonal of a causal mask, half of them,
and its backward runs five matmuls per block to the forward's two, 2.5x the forward's FLOPs; the
unfused math path (``flash_attention: false``, kind ``attention_math``) computes every score and
backward is twice forward. Norms, activations and the embedding lookup count no FLOPs: their time
comes from the bytes they move (roofline). Each matmul records its GEMM shape per sequence
``(seq, in, out)`` for the compute model's tile and wave quantisation.

Activation bytes saved for backward follow Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", sec. 4.1: per layer and sequence ``34*s*h + 5*a*s^2``
bytes at 16-bit with dropout and without flash attention. Here the same accounting is itemised per
operator and scaled by the dtype's bytes (dropout masks are 1 byte each). With flash attention
(the default for language models: Dao et al. 2022, "FlashAttention") the ``s^2`` terms go away and
only the softmax log-sum-exp (fp32, ``a*s``) is kept. Gated FFNs (SwiGLU, Shazeer 2020) save the
gate, the up projection and the activated gate (``3*s*ffn`` elements).

Attention of 2024-25 models: a ``head_dim`` other than ``hidden / heads`` (Qwen3, Gemma) sets the
query/key/value widths; multi-head latent attention (``mla``; DeepSeek-AI 2024, "DeepSeek-V2",
arXiv 2405.04434, sec. 2.1) replaces the q/k/v projection with down-projections to small latents,
their norms and up-projections to every head; a sliding window (Jiang et al. 2023, "Mistral 7B",
sec. 2; per block through ``window_pattern``, as Gemma 2/3 and GPT-OSS alternate local and global
layers) shrinks the fused kernel's work to the band of the causal mask; attention sinks (Xiao et
al. 2023, "Efficient Streaming Language Models with Attention Sinks"; GPT-OSS learns one logit per
head) add ``heads`` parameters; ``qk_norm`` (Qwen3, Gemma 3) normalises each query and key head;
``post_norms`` (Gemma 2/3) adds a norm after attention and after the feed-forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.models import check_keys, get_bool, get_choice, get_nonnegative_int, get_positive_int
from simcore.workload.types import Layer, MLADims, MoEDims, ParameterTie, TransformerDims, Workload

__all__ = [
    "GELU_TANH_ACCESSES",
    "INF_CLAMP_BYTES",
    "SHAPE_KEYS_OPTIONAL",
    "SHAPE_KEYS_REQUIRED",
    "TransformerShape",
    "block_layers",
    "build_layers",
    "build_workload",
    "matmul_layer",
    "transformer_dims",
    "without_input_gradient",
]

SHAPE_KEYS_REQUIRED = ("layers", "hidden", "heads", "ffn", "vocab", "seq_len")
SHAPE_KEYS_OPTIONAL = (
    "kv_heads",
    "tied_embeddings",
    "gated_ffn",
    "norm",
    "bias",
    "positions",
    "max_positions",
    "token_types",
    "embedding_norm",
    "final_norm",
    "pooler",
    "dropout",
    "flash_attention",
    "fused_softmax",
    "softmax_fp32",
    "ffn_dropout",
    "moe",
    "causal",
    "activation",
    "lm_head",
    "head_dim",
    "qkv_bias",
    "out_bias",
    "qk_norm",
    "post_norms",
    "sliding_window",
    "window_pattern",
    "attention_sinks",
    "mla",
    "attention_syncs",
    "fp16_inf_clamp",
)
MOE_KEYS_REQUIRED = ("experts", "top_k", "expert_ffn")
MOE_KEYS_OPTIONAL = ("shared_experts", "dense_layers", "router_bias")
MLA_KEYS_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_KEYS_OPTIONAL = ("q_lora_rank",)
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
POSITIONS = ("learned", "rotary", "relative")
# T5's relative attention bias: relative_attention_num_buckets (32, every T5 config on the Hugging Face
# hub, e.g. google-t5/t5-large config.json) learned logits per head, held by the first block only
RELATIVE_BUCKETS = 32
WINDOW_KINDS = ("sliding", "full")  # entries of window_pattern

LOSS_BYTES_PER_LOGIT = 4  # cross entropy keeps fp32 log-softmax of the logits (Korthikanti 2022, sec. 4.3)


@dataclass(frozen=True, slots=True)
class TransformerShape:
    """The shape of a transformer; defaults describe a GPT-2-like pre-LN decoder."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None  # grouped-query attention (Ainslie et al. 2023); None = heads
    tied_embeddings: bool = True  # output projection shares the token embedding matrix
    gated_ffn: bool = False  # SwiGLU: gate and up projections of width ffn, then down
    norm: str = "layernorm"  # "layernorm" (weight + bias) or "rmsnorm" (weight only)
    bias: bool = True  # linear layers carry biases
    # "learned" (a position-embedding table), "rotary" (no parameters) or "relative" (T5: a learned
    # bias per head and distance bucket, in the first block, added to the attention scores)
    positions: str = "learned"
    max_positions: int | None = None  # size of the learned position table; None = seq_len
    token_types: int = 0  # BERT's segment embeddings
    embedding_norm: bool = False  # a norm right after the embeddings (BERT)
    final_norm: bool = True  # a norm before the output projection (GPT-2, Llama)
    pooler: bool = False  # BERT's pooler (hidden x hidden linear on the first token)
    dropout: bool = True  # dropout layers present (1-byte masks saved for backward)
    flash_attention: bool = True  # attention scores never materialised (no s^2 activation term)
    # eager attention as Megatron-LM runs it (FusedScaleMaskSoftmax, the scale in baddbmm's alpha, the
    # heads as strided batches of [s, b, heads, d] views): no separate scale/mask kernels, no layout
    # copies. False: Hugging Face's eager chain (scale, mask, softmax as separate kernels)
    fused_softmax: bool = False
    # Hugging Face's eager T5Attention: softmax(scores.float()).type_as(scores), the scores upcast to
    # fp32, softmaxed in fp32 and cast back (three kernels instead of one)
    softmax_fp32: bool = False
    ffn_dropout: bool = False  # a dropout between the FFN's activation and its output (T5's DenseReluDense)
    moe: MoEDims | None = None  # mixture-of-experts feed-forward (see MoEDims)
    causal: bool = True  # decoder self-attention (the fused kernel skips the masked half)
    # the FFN's activation when not gated: gelu (torch's fused erf kernel), gelu_tanh (GPT-2's
    # "gelu_new", eager: eight elementwise kernels), relu; a gated FFN uses silu (SwiGLU)
    activation: str = "gelu"
    lm_head: bool = True  # an output projection over the vocabulary and its loss (False: a bare encoder)
    head_dim: int | None = None  # width of one attention head when not hidden / heads (Qwen3, Gemma)
    qkv_bias: bool | None = None  # biases on the query/key/value projections (None: as `bias`; Qwen2)
    out_bias: bool | None = None  # a bias on the attention output projection (None: as `bias`)
    qk_norm: bool = False  # a norm of every query and key head before attention (Qwen3, Gemma 3)
    post_norms: bool = False  # norms after attention and after the FFN, before each residual (Gemma 2/3)
    sliding_window: int | None = None  # attention to the last `sliding_window` tokens only (Mistral)
    # which blocks attend through the window, repeated over the blocks (True: sliding, False: full);
    # () = every block (Gemma 2: (True, False); Gemma 3: five sliding, one full; GPT-OSS as Gemma 2)
    window_pattern: tuple[bool, ...] = ()
    attention_sinks: bool = False  # a learned sink logit per head in the softmax (GPT-OSS)
    mla: MLADims | None = None  # multi-head latent attention (DeepSeek-V2/V3) instead of q/k/v projections
    # host syncs per block forward of the unfused eager attention (flash_attention and fused_softmax
    # false): Hugging Face's GPT2Attention._attn of 2022 builds two scalars as blocking host-to-device
    # copies (the 1/sqrt(d) divisor ``torch.tensor(..., device=...)`` and the mask value
    # ``torch.tensor(...).to(device)``): 2 (simcore/data/host_syncs.yaml, hf_eager_attention)
    attention_syncs: int = 0
    # Hugging Face's T5Block in fp16: after each sub-layer ``torch.isinf(hidden_states).any()`` in a
    # Python ``if`` (an isinf kernel, an any reduction and a host sync; the clamp itself runs only on
    # an overflow), simcore/data/host_syncs.yaml, hf_t5_inf_clamp
    fp16_inf_clamp: bool = False

    def __post_init__(self) -> None:
        self._check_moe()
        self._check_attention()
        if self.positions == "learned" and self.seq_len > self.position_table:
            raise TrainsimError(
                f"transformer: seq_len {self.seq_len} exceeds the {self.position_table} "
                "learned positions (max_positions)"
            )

    def _check_moe(self) -> None:
        if self.moe is not None:
            if self.moe.top_k > self.moe.experts:
                raise TrainsimError(
                    f"transformer: moe top_k ({self.moe.top_k}) must be at most experts ({self.moe.experts})"
                )
            if self.moe.dense_layers > self.layers:
                raise TrainsimError(
                    f"transformer: moe dense_layers ({self.moe.dense_layers}) exceeds layers ({self.layers})"
                )

    def _check_attention(self) -> None:
        def refuse(reason: str) -> None:
            raise TrainsimError(f"transformer: {reason}")

        if self.mla is not None and self.head_dim is not None:
            refuse("give head_dim or mla, not both (mla sets its own head widths)")
        if self.mla is not None and self.kv_heads not in (None, self.heads):
            refuse(f"mla has one key/value head per query head; kv_heads ({self.kv_heads}) must be left out")
        if self.mla is not None and self.qk_norm:
            refuse("qk_norm is not defined with mla (its latents have their own norms)")
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            refuse(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), or give head_dim")
        if self.heads % self.n_kv_heads:
            refuse(f"heads ({self.heads}) must be a multiple of kv_heads ({self.n_kv_heads})")
        if self.window_pattern and self.sliding_window is None:
            refuse("window_pattern needs sliding_window (the window's size in tokens)")
        if len(self.window_pattern) > self.layers:
            refuse(f"window_pattern has {len(self.window_pattern)} entries, more than layers ({self.layers})")
        if self.sliding_window is not None and not self.causal:
            refuse("sliding_window is modelled for causal decoders only (causal: true)")

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads (equal to heads without grouped-query attention; one per head with MLA)."""
        return self.kv_heads or self.heads

    @property
    def head_width(self) -> int:
        """Width of one attention head of standard attention (``head_dim``, else hidden / heads)."""
        return self.head_dim or self.hidden // self.heads

    @property
    def qk_head_dim(self) -> int:
        """Width of one query (and key) head."""
        return self.mla.qk_head_dim if self.mla is not None else self.head_width

    @property
    def v_head_dim(self) -> int:
        """Width of one value head (and of each head's attention output)."""
        return self.mla.v_head_dim if self.mla is not None else self.head_width

    @property
    def q_width(self) -> int:
        """Query features per token."""
        return self.heads * self.qk_head_dim

    @property
    def k_width(self) -> int:
        """Key features per token (as the attention kernel reads them)."""
        return self.n_kv_heads * self.qk_head_dim

    @property
    def v_width(self) -> int:
        """Value features per token (as the attention kernel reads them)."""
        return self.n_kv_heads * self.v_head_dim

    @property
    def attn_width(self) -> int:
        """Features per token of the attention output (the output projection's input)."""
        return self.heads * self.v_head_dim

    def window(self, block: int) -> int | None:
        """The sliding window block ``block`` attends through, or None for full attention."""
        if self.sliding_window is None:
            return None
        if self.window_pattern and not self.window_pattern[block % len(self.window_pattern)]:
            return None
        return self.sliding_window

    @property
    def position_table(self) -> int:
        """Rows of the learned position table."""
        return self.max_positions or self.seq_len

    @classmethod
    def from_mapping(cls, data: object, *, where: str) -> TransformerShape:
        """A shape from a user mapping, validated strictly (unknown/missing keys, non-positive sizes)."""
        m = check_keys(data, SHAPE_KEYS_REQUIRED, SHAPE_KEYS_OPTIONAL, where)
        sizes: dict[str, Any] = {key: get_positive_int(m, key, where) for key in SHAPE_KEYS_REQUIRED}
        sizes.update(_attention_options(m, where))
        options: dict[str, Any] = dict(
            kv_heads=get_positive_int(m, "kv_heads", where) if "kv_heads" in m else None,
            tied_embeddings=get_bool(m, "tied_embeddings", where, True),
            gated_ffn=get_bool(m, "gated_ffn", where, False),
            norm=get_choice(m, "norm", where, ("layernorm", "rmsnorm"), "layernorm"),
            bias=get_bool(m, "bias", where, True),
            positions=get_choice(m, "positions", where, POSITIONS, "learned"),
            max_positions=get_positive_int(m, "max_positions", where) if "max_positions" in m else None,
            token_types=get_nonnegative_int(m, "token_types", where, 0),
            embedding_norm=get_bool(m, "embedding_norm", where, False),
            final_norm=get_bool(m, "final_norm", where, True),
            pooler=get_bool(m, "pooler", where, False),
            dropout=get_bool(m, "dropout", where, True),
            flash_attention=get_bool(m, "flash_attention", where, True),
            fused_softmax=get_bool(m, "fused_softmax", where, False),
            softmax_fp32=get_bool(m, "softmax_fp32", where, False),
            ffn_dropout=get_bool(m, "ffn_dropout", where, False),
            moe=_moe_from_mapping(m["moe"], f"{where}: moe") if "moe" in m else None,
            causal=get_bool(m, "causal", where, True),
            activation=get_choice(m, "activation", where, ACTIVATIONS, "gelu"),
            lm_head=get_bool(m, "lm_head", where, True),
            attention_syncs=get_nonnegative_int(m, "attention_syncs", where, 0),
            fp16_inf_clamp=get_bool(m, "fp16_inf_clamp", where, False),
        )
        try:
            return cls(**sizes, **options)
        except TrainsimError as exc:
            raise TrainsimError(f"{where}: {exc}") from None

    def with_seq_len(self, seq_len: int) -> TransformerShape:
        """The same model at another sequence length (learned position tables keep their size)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields["max_positions"] = self.position_table
        fields["seq_len"] = seq_len
        return TransformerShape(**fields)


def _optional_int(m: Mapping[str, Any], key: str, where: str) -> int | None:
    return get_positive_int(m, key, where) if key in m else None


def _optional_bool(m: Mapping[str, Any], key: str, where: str) -> bool | None:
    return get_bool(m, key, where, False) if key in m else None


def _attention_options(m: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The shape keys of 2024-25 attention: head width, biases, norms, windows, sinks, MLA."""
    return dict(
        head_dim=_optional_int(m, "head_dim", where),
        qkv_bias=_optional_bool(m, "qkv_bias", where),
        out_bias=_optional_bool(m, "out_bias", where),
        qk_norm=get_bool(m, "qk_norm", where, False),
        post_norms=get_bool(m, "post_norms", where, False),
        sliding_window=_optional_int(m, "sliding_window", where),
        window_pattern=_window_pattern(m.get("window_pattern", []), f"{where}: key 'window_pattern'"),
        attention_sinks=get_bool(m, "attention_sinks", where, False),
        mla=_mla_from_mapping(m["mla"], f"{where}: mla") if "mla" in m else None,
    )


def _window_pattern(value: object, where: str) -> tuple[bool, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v in WINDOW_KINDS for v in value):
        raise TrainsimError(
            f"{where}: expected a list of {' or '.join(WINDOW_KINDS)}, repeated over the blocks"
        )
    return tuple(v == "sliding" for v in value)


def _mla_from_mapping(data: object, where: str) -> MLADims:
    m = check_keys(data, MLA_KEYS_REQUIRED, MLA_KEYS_OPTIONAL, where)
    return MLADims(
        kv_lora_rank=get_positive_int(m, "kv_lora_rank", where),
        qk_nope_head_dim=get_positive_int(m, "qk_nope_head_dim", where),
        qk_rope_head_dim=get_positive_int(m, "qk_rope_head_dim", where),
        v_head_dim=get_positive_int(m, "v_head_dim", where),
        q_lora_rank=get_nonnegative_int(m, "q_lora_rank", where, 0),
    )


def _moe_from_mapping(data: object, where: str) -> MoEDims:
    m = check_keys(data, MOE_KEYS_REQUIRED, MOE_KEYS_OPTIONAL, where)
    return MoEDims(
        experts=get_positive_int(m, "experts", where),
        top_k=get_positive_int(m, "top_k", where),
        expert_ffn=get_positive_int(m, "expert_ffn", where),
        shared_experts=get_nonnegative_int(m, "shared_experts", where, 0),
        dense_layers=get_nonnegative_int(m, "dense_layers", where, 0),
        router_bias=get_bool(m, "router_bias", where, False),
    )


def _elementwise(
    name: str, kind: str, block: int, params: int, saved: float, out: float, moved: float
) -> Layer:
    return Layer(name, kind, block, params, 0.0, 0.0, saved, out, moved)


def matmul_layer(
    name: str, block: int, s: int, d_in: int, d_out: int, bias: bool, e: int, extra_saved: float
) -> Layer:
    """A linear layer on ``s`` tokens: saves its input, 2 FLOPs per weight per token forward."""
    flops = 2.0 * s * d_in * d_out
    return Layer(
        name,
        "linear",
        block,
        d_in * d_out + (d_out if bias else 0),
        flops,
        2.0 * flops,
        e * s * d_in + extra_saved,
        e * s * d_out,
        e * s * (d_in + d_out),
        (float(s), float(d_in), float(d_out)),
    )


def _attention_fraction(shape: TransformerShape, block: int) -> float:
    """The share of the ``seq x seq`` query-key pairs a fused kernel computes in block ``block``.

    A causal kernel skips the blocks above the diagonal, half of them. With a sliding window of
    ``w < seq`` tokens (FlashAttention-2's ``window_size``) it also skips the blocks left of the
    band: ``seq * w - w^2 / 2`` pairs, which is ``seq^2 / 2`` at ``w = seq``.
    """
    window = shape.window(block)
    s = shape.seq_len
    if window is None or window >= s:
        return 0.5 if shape.causal else 1.0
    return (s * window - window * window / 2) / (s * s)


def _attention_core(shape: TransformerShape, block: int, e: int) -> Layer:
    """Scores and weighted sum of the values: ``2*s*s`` FLOPs per query-key feature and per value
    feature (``4*s*s*hidden`` for standard attention). Attention sinks add one learned logit per
    head to each softmax row: ``heads`` parameters, no FLOPs worth counting. The eager path
    computes the full score matrix whatever the window (Hugging Face masks it, as for causality)."""
    s, a = shape.seq_len, shape.heads
    q, o = shape.q_width, shape.attn_width
    qkv_elems = s * (q + shape.k_width + shape.v_width)
    flops = 4.0 * s * s * q if q == o else 2.0 * s * s * (q + o)  # Q K^T and softmax(.) V
    sinks = a if shape.attention_sinks else 0
    if shape.positions == "relative" and block == 0:
        sinks += RELATIVE_BUCKETS * a  # T5's relative_attention_bias (an embedding of buckets x heads)
    if shape.flash_attention:
        saved = e * qkv_elems + 4.0 * a * s  # Q, K, V and the fp32 log-sum-exp
        moved = float(e * (qkv_elems + s * o))
        executed = flops * _attention_fraction(shape, block)  # blocks above the diagonal are skipped
        return Layer(
            f"block{block}.attn_core",
            "attention",
            block,
            sinks,
            executed,
            2.5 * executed,
            saved,
            e * s * o,
            moved,
        )
    scores = a * s * s
    soft = 4 if shape.softmax_fp32 else e  # the softmax's saved output (fp32 under softmax_fp32)
    saved = float(e * qkv_elems + soft * scores + ((1 + e) * scores if shape.dropout else 0))
    fwd_bytes, bwd_bytes, fwd_serial, bwd_serial = eager_attention_bytes(shape, e)
    syncs = 0.0 if shape.fused_softmax else float(shape.attention_syncs)
    return Layer(
        f"block{block}.attn_core",
        "attention_math",
        block,
        sinks,
        flops,
        2.0 * flops,
        saved,
        e * s * o,
        fwd_bytes,
        bwd_bytes_ratio=bwd_bytes / fwd_bytes,
        serial_fraction=(fwd_serial / fwd_bytes, bwd_serial / bwd_bytes),
        host_syncs=(syncs, 0.0),
    )


def eager_attention_bytes(shape: TransformerShape, e: int) -> tuple[float, float, float, float]:
    """Bytes per sample of eager attention (Hugging Face's BERT/GPT-2 ``_attn`` of 2019-2022, no
    FlashAttention) as its kernels move them: (forward, backward, forward serial, backward serial),
    the serial ones being the memory-bound kernels between the batched GEMMs.

    Forward on the ``heads x s x s`` scores: Q K^T writes them, the scale reads and writes them, a
    causal decoder's ``torch.where`` with the mask buffer reads and writes them, softmax reads and
    writes them, dropout reads them and writes them and a 1-byte mask, and P V reads them: 2 passes
    in the GEMMs, 4 (+2 causal, +2 + 1/e dropout) between them. ``torch.matmul`` on the head-split
    (permuted) Q, K^T and V copies each to a contiguous batch first, and the heads are merged back
    with ``.contiguous()``: four layout copies (read, write) of ``s x width``.

    Backward (the autograd formulas of those ops): dP = dO V^T writes the scores, dV = P^T dO reads
    P, dropout's backward reads the gradient and the mask and writes, softmax's reads the gradient
    and its saved output and writes, ``where``'s reads and writes, the scale's reads and writes,
    dQ = dS K and dK = dS^T Q read dS once each: 4 passes in the GEMMs, 5 (+2 causal, +2 + 1/e
    dropout) between them, not twice the forward's; the four GEMMs read and write twice the forward
    GEMMs' Q, K, V and output bytes; the gradients of Q, K, V and of the output are copied back
    through the same four non-viewable reshapes.

    T5 (Hugging Face's T5Attention): no scale; ``positions: relative`` adds the position bias in
    place (read, write) and its backward passes the gradient on (no kernel); with ``softmax_fp32``
    the softmax is three kernels, ``softmax(scores.float()).type_as(scores)``: upcast (read e, write
    4), softmax (4, 4), cast back (4, e), and in backward the cast's gradient upcast (e, 4),
    ``_softmax_backward_data`` on the fp32 gradient and saved output (4 + 4, 4) and the upcast's
    cast back (4, e): 10 and 12 passes of ``e`` bytes at 16 bits instead of 2 and 3.

    With ``fused_softmax`` (Megatron-LM's FusedScaleMaskSoftmax, ``masked_softmax_fusion`` on by
    default; the 1/sqrt(d) scale in ``baddbmm``'s alpha) the scale, mask and softmax are one kernel
    (forward: read, write; backward: read the gradient and the saved output, write) and ``bmm`` takes
    the heads of the ``[s, b, heads, d]`` views as strided batches: no layout copies.
    """
    s = shape.seq_len
    scores = float(shape.heads * s * s)
    qkv_elems = s * (shape.q_width + shape.k_width + shape.v_width)
    io = float(e * (qkv_elems + s * shape.attn_width))  # Q, K, V read, the output written
    drop = 2 + 1 / e if shape.dropout else 0
    if shape.fused_softmax:  # one softmax kernel (read, write; backward: gradient, output, write)
        return (
            io + 2 * e * scores + (2 + drop) * e * scores,
            2 * io + (4 + 3 + drop) * e * scores,
            (2 + drop) * e * scores,
            (3 + drop) * e * scores,
        )
    copies = 2.0 * io  # four layout copies, each read and written
    mask = 2 if shape.causal else 0
    scale_fwd, scale_bwd = (2, 0) if shape.positions == "relative" else (2, 2)
    if shape.softmax_fp32:
        soft_fwd, soft_bwd = (e + 4 + 8 + 4 + e) / e, (e + 4 + 12 + 4 + e) / e
    else:
        soft_fwd, soft_bwd = 2, 3
    fwd_between = scale_fwd + soft_fwd + mask + drop
    bwd_between = scale_bwd + soft_bwd + mask + drop
    fwd_serial = fwd_between * e * scores + copies
    bwd_serial = bwd_between * e * scores + copies
    return (
        io + 2 * e * scores + fwd_serial,
        2 * io + 4 * e * scores + bwd_serial,
        fwd_serial,
        bwd_serial,
    )


def _rmsnorm_bytes(e: int) -> float:
    """Bytes per element the eager RMSNorm moves forward (:func:`_norm`): ``28 + 4e``."""
    return 28.0 + 4.0 * e


def _norm(
    shape: TransformerShape,
    name: str,
    block: int,
    s: int,
    e: int,
    width: int | None = None,
    weights: int | None = None,
) -> Layer:
    """A LayerNorm (kind ``layernorm``: torch's fused kernel, read and write once) or an RMSNorm as eager PyTorch runs it,
    over ``width`` features per token (default: hidden) with ``weights`` scales (default: width).

    RMSNorm has no fused eager kernel (HF ``LlamaRMSNorm``, ``torch.nn.functional.rms_norm`` outside
    ``torch.compile``): upcast to fp32 (read e, write 4), ``pow`` (4, 4), ``mean`` (4), multiply by the
    reciprocal square root (4, 4), downcast (4, e), scale by the weight (e, e): ``28 + 4e`` bytes per
    element; backward keeps the fp32 input and the downcast result (``4 + e`` bytes saved).
    """
    h = shape.hidden if width is None else width
    params = (h if weights is None else weights) * (2 if shape.norm == "layernorm" else 1)
    if shape.norm == "rmsnorm":
        return _elementwise(
            name, "rmsnorm", block, params, (4.0 + e) * s * h, e * s * h, _rmsnorm_bytes(e) * s * h
        )
    return _elementwise(name, "layernorm", block, params, e * s * h, e * s * h, 2.0 * e * s * h)


def _rotary(shape: TransformerShape, block: int, s: int, e: int) -> Layer:
    """Rotary position embedding of the queries and keys as eager PyTorch applies it
    (``q * cos + rotate_half(q) * sin``: two multiplies, a negate, a concatenation and an add,
    ``12e`` bytes per element), saving ``q`` and ``rotate_half(q)`` (and the keys') for backward.
    With MLA only the rotary part of each query head and the one shared rotary key head turn."""
    if shape.mla is not None:
        elems = s * (shape.heads + 1) * shape.mla.qk_rope_head_dim
    else:
        elems = s * (shape.q_width + shape.k_width)
    return _elementwise(
        f"block{block}.rotary", "rotary", block, 0, 2.0 * e * elems, e * elems, 12.0 * e * elems
    )


def _dropout(name: str, block: int, elems: float, e: int) -> Layer:
    """A dropout kernel: read, write and a 1-byte mask (saved by the layer before it)."""
    return _elementwise(name, "dropout", block, 0, 0.0, e * elems, (2 * e + 1) * elems)


# Eager tanh-GELU (Hugging Face's NewGELUActivation, GPT-2's "gelu_new": ``0.5 * x * (1.0 +
# torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))``), element accesses per element of ``ffn``.
# Forward, eight kernels: 0.5 * x (2), pow (2), * 0.044715 (2), x + . (3), * c (2), tanh (2), 1.0 + .
# (2), the product (3) = 18. Backward, autograd's formulas of the same ops (torch
# tools/autograd/derivatives.yaml): the product's two gradients g * v and g * a (3 + 3), tanh_backward
# g * (1 - t^2) (3), the three scalar multiplies (2 each), pow_backward g * (3 * x.pow(2)) (square 2,
# scale 2, product 3), the two adds pass the gradient on without a kernel, and x's three gradients
# (through the sum, pow and 0.5 * x) accumulate in two adds (3 + 3) = 28, not twice the forward's.
GELU_TANH_ACCESSES = (18, 28)

# Bytes per element of T5's fp16 overflow check beyond reading the element (modeling_t5.py T5Block,
# ``torch.isinf(hidden_states).any()``): isinf writes a 1-byte bool mask, any() reads it back
INF_CLAMP_BYTES = 2


def _activation(shape: TransformerShape, name: str, block: int, s: int, e: int) -> Layer:
    """The FFN activation: SwiGLU's silu and product (read 3, write 2 per element of ``ffn``), a
    fused GELU or ReLU (read, write), or eager tanh-GELU (eight kernels forward, 18 element
    accesses, and 28 in backward: :data:`GELU_TANH_ACCESSES`)."""
    f = shape.ffn
    saved = e * s * f * (3 if shape.gated_ffn else 1)
    if not shape.gated_ffn and shape.activation == "gelu_tanh":
        fwd, bwd = GELU_TANH_ACCESSES
        layer = _elementwise(name, "activation", block, 0, saved, e * s * f, fwd * e * s * f)
        return replace(layer, bwd_bytes_ratio=bwd / fwd)
    accesses = 5 if shape.gated_ffn else 2
    return _elementwise(name, "activation", block, 0, saved, e * s * f, accesses * e * s * f)


def _residual(name: str, block: int, s: int, h: int, e: int, *, inf_clamp: bool = False) -> Layer:
    """A residual add (read two, write one; it saves nothing).

    With ``inf_clamp`` (Hugging Face's T5Block in fp16, :data:`INF_CLAMP_BYTES`) the sum is then
    checked for infinities: ``torch.isinf`` reads it and writes a 1-byte mask, ``.any()`` reads the
    mask, and the Python ``if`` on the result is one host sync; none of it has a backward."""
    add = 3.0 * e * s * h
    if not inf_clamp:
        return _elementwise(name, "elementwise", block, 0, 0.0, e * s * h, add)
    check = (e + INF_CLAMP_BYTES) * s * h
    layer = _elementwise(name, "elementwise", block, 0, 0.0, e * s * h, add + check)
    return replace(layer, bwd_bytes_ratio=2.0 * add / (add + check), host_syncs=(1.0, 0.0))


def _mla_projections(shape: TransformerShape, mla: MLADims, block: int, e: int, bias: bool) -> list[Layer]:
    """MLA's query and key/value projections (DeepSeek-V2, sec. 2.1.2-2.1.3, as Hugging Face's
    ``DeepseekV3Attention`` trains it: the latents are projected up, not absorbed): queries through
    a ``q_lora_rank`` latent and its norm (or directly), keys and values through one
    ``kv_lora_rank`` latent plus the shared rotary key head, its norm, then up to every head."""
    s, h, p = shape.seq_len, shape.hidden, f"block{block}"
    if mla.q_lora_rank:
        query = [
            matmul_layer(f"{p}.attn_q_down", block, s, h, mla.q_lora_rank, bias, e, 0.0),
            _norm(shape, f"{p}.attn_q_norm", block, s, e, width=mla.q_lora_rank),
            matmul_layer(f"{p}.attn_q_up", block, s, mla.q_lora_rank, shape.q_width, bias, e, 0.0),
        ]
    else:
        query = [matmul_layer(f"{p}.attn_q", block, s, h, shape.q_width, bias, e, 0.0)]
    kv_up = shape.heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return [
        *query,
        matmul_layer(f"{p}.attn_kv_down", block, s, h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias, e, 0.0),
        _norm(shape, f"{p}.attn_kv_norm", block, s, e, width=mla.kv_lora_rank),
        matmul_layer(f"{p}.attn_kv_up", block, s, mla.kv_lora_rank, kv_up, bias, e, 0.0),
    ]


def _attention_layers(shape: TransformerShape, block: int, e: int) -> list[Layer]:
    """Projections, head norms, rotary positions and the attention kernel of one block."""
    s, p = shape.seq_len, f"block{block}"
    bias = shape.bias if shape.qkv_bias is None else shape.qkv_bias
    if shape.mla is not None:
        layers = _mla_projections(shape, shape.mla, block, e, bias)
    else:
        qkv_out = shape.q_width + shape.k_width + shape.v_width
        layers = [matmul_layer(f"{p}.attn_qkv", block, s, shape.hidden, qkv_out, bias, e, 0.0)]
    if shape.qk_norm:  # one norm of head width for the queries, one for the keys (Qwen3 q_norm/k_norm)
        width, weights = shape.q_width + shape.k_width, 2 * shape.head_width
        layers.append(_norm(shape, f"{p}.attn_qk_norm", block, s, e, width=width, weights=weights))
    if shape.positions == "rotary":
        layers.append(_rotary(shape, block, s, e))
    layers.append(_attention_core(shape, block, e))
    return layers


def block_layers(shape: TransformerShape, block: int, e: int, *, fp16: bool = False) -> list[Layer]:
    """One transformer block's operators in execution order (per sequence); ``fp16``: the compute
    dtype is fp16 (T5's overflow checks, ``fp16_inf_clamp``, run only then)."""
    s, h, f = shape.seq_len, shape.hidden, shape.ffn
    clamp = fp16 and shape.fp16_inf_clamp
    mask = float(s * h) if shape.dropout else 0.0
    up_out = f * (2 if shape.gated_ffn else 1)
    p = f"block{block}"
    out_bias = shape.bias if shape.out_bias is None else shape.out_bias
    drop1 = [_dropout(f"{p}.attn_dropout", block, s * h, e)] if shape.dropout else []
    drop2 = [_dropout(f"{p}.mlp_dropout", block, s * h, e)] if shape.dropout else []
    post1 = [_norm(shape, f"{p}.post_attn_norm", block, s, e)] if shape.post_norms else []
    post2 = [_norm(shape, f"{p}.post_mlp_norm", block, s, e)] if shape.post_norms else []
    head = [
        _norm(shape, f"{p}.norm1", block, s, e),
        *_attention_layers(shape, block, e),
        matmul_layer(f"{p}.attn_out", block, s, shape.attn_width, h, out_bias, e, mask),
        *post1,
        *drop1,
        _residual(f"{p}.residual1", block, s, h, e, inf_clamp=clamp),
        _norm(shape, f"{p}.norm2", block, s, e),
    ]
    tail = [*post2, *drop2, _residual(f"{p}.residual2", block, s, h, e, inf_clamp=clamp)]
    if shape.moe is not None and shape.moe.is_moe_block(block):
        return [*head, *_moe_ffn_layers(shape, shape.moe, block, e), *tail]
    # T5's DenseReluDense drops out the activation (its mask kept for backward, by the output GEMM)
    inner = shape.ffn_dropout and shape.dropout
    act_drop = [_dropout(f"{p}.mlp_act_dropout", block, s * f, e)] if inner else []
    out_saved = mask + (float(s * f) if inner else 0.0)
    return [
        *head,
        matmul_layer(f"{p}.mlp_in", block, s, h, up_out, shape.bias, e, 0.0),
        _activation(shape, f"{p}.mlp_act", block, s, e),
        *act_drop,
        matmul_layer(f"{p}.mlp_out", block, s, f, h, shape.bias, e, out_saved),
        *tail,
    ]


def without_input_gradient(layer: Layer, e: int) -> Layer:
    """``layer`` (of ``e``-byte elements) when its input needs no gradient (a benchmark's input tensor made without
    ``requires_grad``): autograd computes its weights' gradients only (torch's
    ``derivatives.yaml``: each input's formula runs only where that input requires grad).

    - ``linear``: the weight-gradient GEMM only (as many FLOPs as the forward); it reads the saved
      input and the output gradient, the forward's bytes (``bwd_bytes_ratio`` 1) and writes no
      input gradient;
    - ``layernorm``: ``native_layer_norm_backward`` with output mask ``[False, True, True]``: it reads
      the output gradient and the input for the scale and shift gradients and writes no input
      gradient: ``2e`` bytes per element, the forward's;
    - ``rmsnorm`` (the eager chain, :func:`_norm`): upcast, square, mean and reciprocal square root
      of an input without gradient record nothing; only ``weight * x``'s weight gradient runs,
      ``(grad * x).sum()``: a product (read ``e`` twice, write ``e``) and its reduction (read ``e``),
      ``4e`` bytes per element against the forward's ``28 + 4e``.
    """
    if layer.kind == "linear":
        return replace(layer, bwd_flops=layer.fwd_flops, bwd_bytes_ratio=1.0)
    if layer.kind == "layernorm":
        return replace(layer, bwd_bytes_ratio=1.0)
    if layer.kind == "rmsnorm":
        return replace(layer, bwd_bytes_ratio=4.0 * e / _rmsnorm_bytes(e))
    raise TrainsimError(
        f"{layer.name}: the input-gradient-free backward is modelled for kinds linear, layernorm and "
        f"rmsnorm, not {layer.kind!r}"
    )


def _moe_ffn_layers(shape: TransformerShape, moe: MoEDims, block: int, e: int) -> list[Layer]:
    """Router, shared experts (if any) and routed experts of one MoE block (per sequence).

    The router is a linear layer to ``experts`` logits (no bias, as Mixtral and DeepSeekMoE; GPT-OSS's
    has one: ``router_bias``). The
    routed experts hold ``experts`` feed-forwards of width ``expert_ffn`` but each token passes
    through ``top_k`` of them: their FLOPs, saved inputs and intermediates are ``top_k`` times a
    dense feed-forward of that width (GShard, Lepikhin et al. 2020, sec. 2). Shared experts see
    every token, as one dense feed-forward of width ``shared_experts * expert_ffn``.
    """
    s, h, k, f = shape.seq_len, shape.hidden, moe.top_k, moe.expert_ffn
    mask = float(s * h) if shape.dropout else 0.0
    up = f * (2 if shape.gated_ffn else 1)
    act_width = f * (3 if shape.gated_ffn else 1)
    p = f"block{block}"
    router = matmul_layer(f"{p}.moe_router", block, s, h, moe.experts, moe.router_bias, e, 0.0)
    layers = [router]
    if moe.shared_experts:
        fs = f * moe.shared_experts
        up_s = fs * (2 if shape.gated_ffn else 1)
        layers += [
            matmul_layer(f"{p}.shared_in", block, s, h, up_s, shape.bias, e, 0.0),
            _elementwise(
                f"{p}.shared_act",
                "activation",
                block,
                0,
                e * s * act_width * moe.shared_experts,
                e * s * fs,
                e * s * (up_s + fs),
            ),
            matmul_layer(f"{p}.shared_out", block, s, fs, h, shape.bias, e, 0.0),
        ]
    expert_in = matmul_layer(f"{p}.experts_in", block, k * s, h, up, shape.bias, e, 0.0)
    expert_out = matmul_layer(f"{p}.experts_out", block, k * s, f, h, shape.bias, e, mask)
    layers += [
        replace(expert_in, params=moe.experts * expert_in.params),
        _elementwise(
            f"{p}.experts_act",
            "activation",
            block,
            0,
            e * k * s * act_width,
            e * k * s * f,
            e * k * s * (up + f),
        ),
        replace(expert_out, params=moe.experts * expert_out.params, output_bytes=e * s * h),
    ]
    return layers


def _embedding(shape: TransformerShape, e: int) -> list[Layer]:
    s, h = shape.seq_len, shape.hidden
    params = shape.vocab * h + shape.token_types * h
    if shape.positions == "learned":
        params += shape.position_table * h
    mask = float(s * h) if shape.dropout else 0.0
    layers = [Layer("embed", "embedding", -1, params, 0.0, 0.0, mask, e * s * h, 2.0 * e * s * h)]
    if shape.embedding_norm:
        layers.append(_norm(shape, "embed_norm", -1, s, e))
    return layers


def _head(shape: TransformerShape, e: int) -> list[Layer]:
    s, h, v = shape.seq_len, shape.hidden, shape.vocab
    layers: list[Layer] = []
    if shape.final_norm:
        layers.append(_norm(shape, "final_norm", -1, s, e))
    if shape.pooler:
        layers.append(matmul_layer("pooler", -1, 1, h, h, True, e, 0.0))
    if not shape.lm_head:
        return layers
    head = matmul_layer("lm_head", -1, s, h, v, False, e, LOSS_BYTES_PER_LOGIT * s * v)
    if shape.tied_embeddings:
        head = replace(head, params=0)
    layers.append(head)
    # cross entropy over the logits: upcast to fp32 (read e, write 4), log-softmax (4, 4) and the
    # gather; its fp32 log-probabilities are counted as the head's saved bytes
    layers.append(_elementwise("loss", "loss", -1, 0, 0.0, 4.0, (12.0 + e) * s * v))
    return layers


def build_layers(shape: TransformerShape, dtype: str) -> tuple[Layer, ...]:
    """All operators of the model in execution order, per sequence of ``shape.seq_len`` tokens."""
    e = DTYPE_BYTES[dtype]
    layers = _embedding(shape, e)
    for block in range(shape.layers):
        layers.extend(block_layers(shape, block, e, fp16=dtype == "fp16"))
    layers.extend(_head(shape, e))
    return tuple(layers)


def build_workload(
    name: str, shape: TransformerShape, *, seq_len: int | None, dtype: str, source: str
) -> Workload:
    """The workload of a transformer, at ``seq_len`` if given (else the shape's)."""
    if seq_len is not None and seq_len != shape.seq_len:
        shape = shape.with_seq_len(seq_len)
    layers = build_layers(shape, dtype)
    ties: tuple[ParameterTie, ...] = ()
    if shape.tied_embeddings and shape.lm_head:  # the token embedding (layer 0) is the output head's weight
        head = next(i for i, layer in enumerate(layers) if layer.name == "lm_head")
        ties = (ParameterTie(shape.vocab * shape.hidden, (0, head)),)
    return Workload(
        name=name,
        layers=layers,
        block_names=tuple(f"block{i}" for i in range(shape.layers)),
        dtype=dtype,
        tokens_per_sample=shape.seq_len,
        source=source,
        ties=ties,
        dims=transformer_dims(shape),
    )


def transformer_dims(shape: TransformerShape) -> TransformerDims:
    """What model parallelism needs to know of ``shape`` (see :class:`TransformerDims`)."""
    return TransformerDims(
        layers=shape.layers,
        hidden=shape.hidden,
        heads=shape.heads,
        kv_heads=shape.n_kv_heads,
        ffn=shape.ffn,
        vocab=shape.vocab,
        seq_len=shape.seq_len,
        gated_ffn=shape.gated_ffn,
        tied_embeddings=shape.tied_embeddings,
        dropout=shape.dropout,
        flash_attention=shape.flash_attention,
        bias=shape.bias,
        moe=shape.moe,
        head_width=_dims_head_width(shape),
    )


def _dims_head_width(shape: TransformerShape) -> int | None:
    """``TransformerDims.head_width``: None where hidden / heads is the head width."""
    if shape.mla is not None:
        return (shape.mla.qk_head_dim + shape.mla.v_head_dim) // 2
    return shape.head_dim


def shape_summary(shape: TransformerShape) -> Mapping[str, Any]:
    """The shape as a plain mapping (for reports)."""
    return {name: getattr(shape, name) for name in shape.__dataclass_fields__}
