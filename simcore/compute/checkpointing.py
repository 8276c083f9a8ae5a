"""Per-op selective activation checkpointing as torchtitan runs it (``--recompute selective-op``).

torchtitan's default ``activation_checkpoint.mode = "selective"`` with ``selective_ac_option = "op"``
wraps every transformer block in ``torch.utils.checkpoint`` with a policy per aten op
(``torchtitan/distributed/activation_checkpoint.py``, ``_get_default_save_ops`` and
``SelectiveAC._wrap_block``, commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a):

- **saved** (``MUST_SAVE``): the outputs of the compute-intensive ops of
  ``torch._functorch.partitioners.get_default_op_list`` (``mm``, ``addmm``, ``bmm``, ``_scaled_mm``,
  the SDPA kernels ...), of ``linear``, ``max`` and ``topk``, and of the ``reduce_scatter_tensor``
  and ``all_to_all_single`` collectives, **except every second** ``mm``/``linear`` of the block:
  the policy counts them in call order and recomputes the 2nd, 4th, 6th ...;
- **recomputed** (``PREFER_RECOMPUTE``): everything else (norms, rotary, activations, dropout,
  residual adds, all-gathers and all-reduces), rerun when backward first needs the block.

In this simulator's layers (:mod:`simcore.workload.models.transformer`) a fused projection holds
several of torchtitan's linears in call order: ``attn_qkv`` is ``wq, wk, wv``, a gated ``mlp_in``
is ``w1, w3`` (``w2(silu(w1(x)) * w3(x))``), so a Llama block runs wq 1 saved, wk 2 recomputed,
wv 3 saved, wo 4 recomputed, w1 5 saved, w3 6 recomputed, w2 7 saved. A linear with a bias runs as
``addmm`` (``at::linear`` on a contiguous 3-D input with a bias: ``_flatten_nd_linear``), which is
saved and not counted; routed experts run ``_grouped_mm``, not in the compute-intensive list, so
they are recomputed (their all-to-all outputs saved); FP8 linears run ``_scaled_mm``, saved and not
counted (``fp8_linears``). Before torchao's 2025 refactor a float8 linear called ``torch.mm`` on its
``Float8Tensor`` subclasses (torchao eab345c, ``manual_float8_matmul_with_args_in_float8``), which the
policy sees as ``aten.mm`` and counts like a bf16 one: ``fp8_linears`` false
(``ParallelOptions.fp8_checkpoint_op = "mm"``). The attention kernel's saved outputs are its output and its fp32 log-sum-exp per head.

:func:`selective_op_policy` says, per layer of one block, the bytes it keeps and the share of its
forward (compute, and collectives) rerun in backward; :mod:`simcore.parallel.recompute` applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcore.workload.types import Layer, TransformerDims

__all__ = ["OpPolicy", "selective_op_policy"]

_LSE_BYTES = 4  # flash / efficient attention's log-sum-exp: one fp32 per head and token


@dataclass(frozen=True, slots=True)
class OpPolicy:
    """What one layer of a checkpointed block keeps and reruns under the per-op policy."""

    saved_bytes: float  # per sample: the outputs of its saved ops
    compute_share: float  # share of its forward compute rerun before the block's backward
    comm_share: float  # share of its forward collectives rerun (all-gathers, all-reduces)


def _suffix(layer: Layer) -> str:
    return layer.name.rsplit(".", 1)[-1]


def _mm_units(layer: Layer, dims: TransformerDims) -> list[float]:
    """Output widths of the bias-free linears a layer fuses, in call order (empty: no counted mm)."""
    suffix = _suffix(layer)
    if layer.kind != "linear" or suffix.startswith("experts") or layer.gemm is None:
        return []
    _, k, n = layer.gemm
    if layer.params > round(k * n):  # a bias: addmm, saved and not counted
        return []
    if suffix == "attn_qkv":
        q = dims.heads * dims.head_dim
        kv = dims.kv_heads * dims.head_dim
        return [q, kv, kv]
    if suffix in ("mlp_in", "shared_in") and dims.gated_ffn:
        return [1.0, 1.0]
    return [1.0]


def _fp8_linear(layer: Layer, fp8_linears: bool) -> bool:
    return fp8_linears and layer.kind == "linear" and not _suffix(layer).startswith("experts")


def selective_op_policy(
    block: Sequence[Layer],
    dims: TransformerDims,
    *,
    sequence_parallel: bool,
    elem: int,
    fp8_linears: bool = False,
) -> list[OpPolicy]:
    """The per-op policy of one block's (sharded) layers in order (see the module docstring).

    ``elem``: bytes per activation element (for the attention's log-sum-exp, which is fp32);
    ``fp8_linears``: the block's linears run as FP8 ``_scaled_mm`` (saved, not counted).
    """
    count = 0
    out = []
    for layer in block:
        role = _suffix(layer)
        units = [] if _fp8_linear(layer, fp8_linears) else _mm_units(layer, dims)
        if layer.kind == "attention":
            # output: tokens x local heads x head width x elem; log-sum-exp: tokens x local heads x 4
            lse = layer.output_bytes / dims.head_dim * _LSE_BYTES / elem
            out.append(OpPolicy(layer.output_bytes + lse, 0.0, 0.0))
            continue
        if layer.kind == "linear" and not units and not role.startswith("experts"):
            out.append(OpPolicy(layer.output_bytes, 0.0, 0.0))  # addmm or _scaled_mm: saved
            continue
        if not units:
            out.append(OpPolicy(0.0, 1.0, 0.0 if role.startswith("experts") else 1.0))
            continue
        total = sum(units)
        recomputed = 0.0
        for width in units:
            count += 1
            if count % 2 == 0:
                recomputed += width
        saved = layer.output_bytes * (total - recomputed) / total
        # The all-gather before a column-parallel linear is replayed; a reduce-scatter's output is
        # saved, an all-reduce's (no sequence parallelism) is not.
        rerun_comm = role in ("attn_qkv", "mlp_in", "shared_in") or not sequence_parallel
        out.append(OpPolicy(saved, recomputed / total, 1.0 if rerun_comm else 0.0))
    return out
