"""The activations a framework's fused kernels save for backward, where they differ from eager
PyTorch's (what :mod:`simcore.workload.models.transformer` counts per operator).

``eager``: the workload as built (PyTorch eager ops: torchtitan, Hugging Face).

``megatron-te``: Megatron-Core's GPT layers on Transformer Engine (NeMo, Megatron-LM with
``--transformer-impl transformer_engine``), which fuse the operators around the GEMMs:

- RMSNorm runs inside TE's ``LayerNormLinear`` (``transformer_engine/pytorch/module/
  layernorm_linear.py``): it keeps its input in the activation dtype and one fp32 ``rsigma`` per
  token, not eager RMSNorm's fp32 upcast beside its downcast output: ``e`` bytes per element (the
  per-token statistic is left out); LayerNorm already saves ``e`` here;
- rotary embeddings run as TE's fused RoPE (``apply_rope_fusion``; ``FusedRoPEFunc`` keeps only the
  frequency table, shared by every layer): nothing per token;
- SwiGLU runs as Megatron's ``SwiGLUFunction`` (``megatron/core/fusions/fused_bias_swiglu.py``),
  which saves its input alone (the gate and up projections, ``2 * ffn`` elements), not eager's
  ``silu`` output beside them;
- with an FP8 recipe run by Transformer Engine (``delayed``), each FP8 linear keeps the FP8 cast of
  its input for the weight gradient (``_Linear.forward`` saves ``inputmat_t``; ``LayerNormLinear``
  its FP8 ``ln_out``): 1 byte per input element instead of ``e``. The attention output projection's
  input is the attention's output, which the fused attention keeps in ``e`` for its own backward
  (FlashAttention's backward reads O), so that linear adds its 1-byte copy to the ``e`` already kept.

Other operators (attention, the head, embeddings, experts, dropout masks) keep the workload's
figures.
"""

from __future__ import annotations

from dataclasses import replace

from simcore.compute.fp8 import is_fp8_linear, load_recipe
from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.types import Layer, Workload

__all__ = ["SAVED_TENSOR_RULES", "saved_tensor_workload"]

SAVED_TENSOR_RULES = ("eager", "megatron-te")
FP8_BYTES = 1
_ATTENTION_OUTPUT = "attn_out"  # the linear whose input the attention keeps too


def saved_tensor_workload(workload: Workload, rule: str, fp8: str = "none") -> Workload:
    """``workload`` with its saved activations as ``rule``'s kernels keep them (``fp8``: the run's
    recipe; only Transformer Engine's change what a linear keeps)."""
    if rule not in SAVED_TENSOR_RULES:
        raise TrainsimError(f"saved-tensor rule {rule!r} unknown; allowed: {', '.join(SAVED_TENSOR_RULES)}")
    if rule == "eager" or workload.dims is None:
        return workload
    e = DTYPE_BYTES[workload.dtype]
    gated = workload.dims.gated_ffn
    te_fp8 = fp8 != "none" and load_recipe(fp8).framework == "transformer-engine"
    layers = tuple(_fused(layer, e, gated, te_fp8) for layer in workload.layers)
    return replace(workload, layers=layers)


def _fused(layer: Layer, e: int, gated: bool, te_fp8: bool) -> Layer:
    """One layer's saved bytes under Megatron-Core + Transformer Engine (module docstring)."""
    saved = layer.activation_bytes
    if layer.kind == "rmsnorm":
        saved *= e / (4.0 + e)  # (4 + e) bytes per element eager -> e
    elif layer.kind == "rotary":
        saved = 0.0
    elif layer.kind == "activation" and gated:
        saved *= 2.0 / 3.0  # gate, up and silu(gate) eager -> gate and up
    elif te_fp8 and is_fp8_linear(layer):
        assert layer.gemm is not None  # is_fp8_linear holds
        m, k, _ = layer.gemm
        kept = e if layer.name.rsplit(".", 1)[-1] == _ATTENTION_OUTPUT else 0
        saved += (kept + FP8_BYTES - e) * m * k
    if saved == layer.activation_bytes:
        return layer
    return replace(layer, activation_bytes=max(0.0, saved))
