"""The layer kind a torch module's own work becomes: what :mod:`simcore.compute.roofline` prices.

The kinds are the ones the preset builders emit (:mod:`simcore.workload.models.transformer`,
:mod:`simcore.workload.models.netbuilder`): ``linear`` (a GEMM), ``conv1x1`` / ``conv`` /
``conv_grouped`` (cuDNN convolutions), ``attention`` (the fused SDPA kernel), and memory-bound kinds
(``embedding``, ``norm``, ``rmsnorm``, ``activation``, ``dropout``, ``pool``, ``elementwise``).
A module of a type not listed here is a ``linear`` if it computes matmul FLOPs
(``FlopCounterMode`` counts only matmuls, convolutions and attention; Hugging Face's GPT-2
``Conv1D`` is an ``addmm``), else ``elementwise``. torch is passed in by the caller.
"""

from __future__ import annotations

from typing import Any

__all__ = ["conv_gemm", "module_kind"]

_MATMUL_KINDS = ("linear", "conv1x1", "conv", "conv_grouped")
_RMSNORM_SUFFIX = "RMSNorm"  # nn.RMSNorm, Hugging Face's LlamaRMSNorm, MistralRMSNorm, ...
_SOFTMAX_NAMES = ("Softmax", "LogSoftmax", "Softmin", "Softmax2d", "MultiheadAttention")
# activations users write themselves (Hugging Face's NewGELUActivation, SiLUActivation, QuickGELU)
_ACTIVATION_MARKS = ("Activation", "GELU", "SiLU", "ReLU", "Swish")


def _typed_kind(torch: Any, module: Any) -> str | None:
    nn = torch.nn
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.groups > 1:
            return "conv_grouped"
        return "conv1x1" if all(k == 1 for k in module.kernel_size) else "conv"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    if type(module).__name__.endswith(_RMSNORM_SUFFIX):
        return "rmsnorm"
    norms = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase, nn.LocalResponseNorm)
    if isinstance(module, norms):
        return "norm"
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return "dropout"
    pools = (
        nn.modules.pooling._MaxPoolNd,
        nn.modules.pooling._AvgPoolNd,
        nn.modules.pooling._AdaptiveAvgPoolNd,
        nn.modules.pooling._AdaptiveMaxPoolNd,
        nn.modules.pooling._LPPoolNd,
    )
    if isinstance(module, pools):
        return "pool"
    name = type(module).__name__
    if type(module).__module__ == "torch.nn.modules.activation":
        return "elementwise" if name in _SOFTMAX_NAMES else "activation"
    return "activation" if any(mark in name for mark in _ACTIVATION_MARKS) else None


def module_kind(torch: Any, module: Any, leaf: bool, flops: float) -> str:
    """The kind of ``module``'s own work (a container's own work has no type of its own)."""
    kind = _typed_kind(torch, module) if leaf else None
    if flops > 0 and kind not in _MATMUL_KINDS:  # matmul FLOPs in a module of no known matmul type
        return "linear"
    return kind or "elementwise"


def conv_gemm(module: Any, output_elements: float) -> tuple[float, float, float]:
    """The implicit GEMM cuDNN runs for a convolution, over the whole traced batch (as
    :meth:`simcore.workload.models.netbuilder.NetBuilder.conv`): output positions x (input channels x
    kernel area / groups) by (output channels / groups)."""
    area = 1
    for size in module.kernel_size:
        area *= int(size)
    positions = output_elements / module.out_channels
    return (
        float(positions),
        float(module.in_channels * area // module.groups),
        float(module.out_channels // module.groups),
    )
