"""trainsim's simulation core: a calibrated discrete-event model of distributed training.

Nothing here imports torch, seaborn or matplotlib at import time.
"""

__version__ = "0.1.0"
