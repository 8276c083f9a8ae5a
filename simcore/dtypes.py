"""Bytes per element of every dtype trainsim knows: the one table every module reads."""

from __future__ import annotations

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
