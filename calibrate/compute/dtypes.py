"""The dtypes ``calibrate.compute`` measures: profile names (``simcore.hardware`` peak_flops keys)
to the torch dtype a benchmark's tensors are made of (tf32 is fp32 storage, TF32 tensor-core math)."""

from __future__ import annotations

import torch

__all__ = ["DTYPES"]

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
