"""Per-rank memory ground truth: real DDP/FSDP2 steps under torch's memory trackers (fake process group).

The model factories are re-exported here because measurements record them as
``calibrate.memory_truth:<factory>`` (a path :func:`simcore.workload.loader.load_workload` imports).
They are looked up when first asked for: the models import torch (~1.5 s), which
``python -m calibrate.memory_truth --help`` does not need.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bert_base", "gpt2_small", "gpt2_tiny", "resnet50", "resnet_tiny"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from calibrate.memory_truth import models  # torch: only when a factory is asked for

    return getattr(models, name)
