"""Achieved bandwidth of eager memory-bound kernels, per layer kind and phase (``data/memory_kernels.yaml``).

The roofline prices a memory-bound layer at its modelled bytes over an achieved bandwidth. One
streaming kernel (a residual add, a fused GELU) reaches about ``memory_efficiency`` of the datasheet
figure; eager PyTorch's decompositions of RMSNorm, rotary embeddings, SwiGLU, LayerNorm and cross
entropy do not: published eager baselines (Liger-Kernel's benchmark table) move their bytes at 0.5-0.8
of it, and their backward is not twice their forward. :func:`memory_fractions` gives, per kind, the
(forward, backward) fraction of the datasheet bandwidth at which such a layer's modelled bytes move.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from simcore.data import data_file
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Layer

__all__ = ["MEMORY_KERNEL_KINDS", "fused_time_ratios", "memory_fractions", "memory_kind"]

_DATA_FILE = "memory_kernels.yaml"
MEMORY_KERNEL_KINDS = ("rmsnorm", "rotary", "layernorm", "loss", "swiglu")


def memory_kind(layer: Layer) -> str:
    """The kind whose bandwidth prices ``layer``: its own, or ``"swiglu"`` for a gated activation.

    A SwiGLU activation is recorded as kind ``activation`` saving three tensors of its output's size
    (the gate's input and both halves, :func:`simcore.workload.models.transformer._activation` and the
    MoE experts'), or two where a fused kernel saves only its input halves (Megatron's
    ``SwiGLUFunction``, :mod:`simcore.compute.saved_tensors`); GELU and ReLU save one.
    """
    if (
        layer.kind == "activation"
        and layer.output_bytes > 0
        and layer.activation_bytes in (3 * layer.output_bytes, 2 * layer.output_bytes)
    ):
        return "swiglu"
    return layer.kind


def _pairs(entry: Any, where: str) -> dict[str, tuple[float, float]]:
    if not isinstance(entry, dict):
        raise TrainsimError(f"{_DATA_FILE}: {where} must map kinds to [forward, backward] fractions")
    pairs = {}
    for kind, value in entry.items():
        if kind not in MEMORY_KERNEL_KINDS:
            raise TrainsimError(
                f"{_DATA_FILE}: {where}.{kind} is not a known kind; allowed: {', '.join(MEMORY_KERNEL_KINDS)}"
            )
        if not isinstance(value, list) or len(value) != 2 or not all(0 < float(v) <= 1 for v in value):
            raise TrainsimError(f"{_DATA_FILE}: {where}.{kind} must be [forward, backward], each in (0, 1]")
        pairs[str(kind)] = (float(value[0]), float(value[1]))
    return pairs


def _by_device(table: dict[str, Any], device: DeviceSpec, where: str) -> Mapping[str, tuple[float, float]]:
    """``table``'s defaults, overridden kind by kind by its first device pattern matching ``device``."""
    if device.kind != "gpu":
        return MappingProxyType({})
    pairs = _pairs(table["defaults"], f"{where}defaults")
    for pattern, override in table["devices"].items():
        if fnmatch.fnmatchcase(device.name, pattern):
            pairs.update(_pairs(override, f"{where}devices.{pattern}"))
            break
    return MappingProxyType(pairs)


def memory_fractions(device: DeviceSpec) -> Mapping[str, tuple[float, float]]:
    """(forward, backward) achieved fraction of ``device``'s datasheet bandwidth per kind; empty on a
    CPU rank (its host does the arithmetic: one memory efficiency, see ``efficiency.yaml``)."""
    return _by_device(data_file(_DATA_FILE), device, "")


def fused_time_ratios(device: DeviceSpec) -> Mapping[str, tuple[float, float]]:
    """(forward, backward) time of a fused kernel (torch.compile, Liger) over the eager chain's, per
    kind; empty on a CPU rank."""
    return _by_device(data_file(_DATA_FILE)["fused"], device, "fused.")
