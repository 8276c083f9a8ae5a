"""The main job's defaults as plain values: what ``python -m experiments.what_if`` runs with no flags.

Kept apart from the driver (:mod:`simcore.whatif.sweep`, which builds its ``DEFAULT_CONFIG`` from
them) so that a command's parser shows them without importing the step model.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_CLUSTERS",
    "DEFAULT_GLOBAL_BATCH",
    "DEFAULT_MICRO_BATCH",
    "DEFAULT_MODEL",
    "DEFAULT_SEQ_LEN",
    "MIN_PS_STEPS",
    "UNEVEN_PS_STEPS",
]

DEFAULT_MODEL = "gpt2-xl"
DEFAULT_SEQ_LEN = 1024
DEFAULT_CLUSTERS = ("dgx-a100", "g5.48xlarge")
# One micro-batch per GPU at 16 GPUs; the one-GPU baseline accumulates 16.
DEFAULT_GLOBAL_BATCH = 64
DEFAULT_MICRO_BATCH = 4
# Parameter-server steps: two on even, deterministic hardware (the second shows steady-state
# staleness); eight where stragglers, mixed devices or jitter let workers drift apart.
MIN_PS_STEPS = 2
UNEVEN_PS_STEPS = 8
