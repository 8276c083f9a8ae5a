"""Achieved bandwidth of the batched GEMMs of eager attention (``data/eager_attention.yaml``).

An ``attention_math`` layer (attention without FlashAttention: Megatron-LM's 2021 core, Hugging Face's
eager ``_attn``) runs batched GEMMs with a head-dim-sized side: ``Q K^T`` writes the ``heads x s x s``
scores with a reduction of only ``head_dim``, ``P V`` reads them into a ``head_dim``-wide output, and
backward's four GEMMs do the same. Published benchmarks of attention alone (FlashAttention's appendix
tables on A100) time them well below a streaming kernel's bandwidth, while the softmax and dropout
kernels between them stream at it. :func:`attention_gemm_fraction` gives, per device, the (forward,
backward) fraction of the datasheet bandwidth at which those GEMMs' bytes move, or None where no
benchmark gives one (the roofline then keeps ``memory_efficiency``).
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from simcore.data import data_file
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.hardware import DeviceSpec

__all__ = ["attention_gemm_fraction"]

_DATA_FILE = "eager_attention.yaml"


def _pair(value: object, where: str) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        raise TrainsimError(f"{_DATA_FILE}: {where} must be [forward, backward], each in (0, 1]")
    fwd, bwd = (float(v) for v in value)
    if not (0 < fwd <= 1 and 0 < bwd <= 1):
        raise TrainsimError(f"{_DATA_FILE}: {where} must be [forward, backward], each in (0, 1]")
    return fwd, bwd


def attention_gemm_fraction(device: DeviceSpec) -> tuple[float, float] | None:
    """(forward, backward) achieved fraction of ``device``'s datasheet bandwidth for the batched GEMMs
    of eager attention; None on a device without a published figure (and on a CPU rank)."""
    if device.kind != "gpu":
        return None
    for pattern, value in data_file(_DATA_FILE)["devices"].items():
        if fnmatch.fnmatchcase(device.name, pattern):
            return _pair(value, f"devices.{pattern}")
    return None
