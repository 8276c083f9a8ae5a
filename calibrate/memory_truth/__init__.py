"""Per-rank memory ground truth: real DDP/FSDP2 steps under torch's memory trackers (fake process group).

The model factories are re-exported here because measurements record them as
``calibrate.memory_truth:<factory>`` (a path :func:`simcore.workload.loader.load_workload` imports).
"""

from calibrate.memory_truth.models import bert_base, gpt2_small, gpt2_tiny, resnet50, resnet_tiny

__all__ = ["bert_base", "gpt2_small", "gpt2_tiny", "resnet50", "resnet_tiny"]
