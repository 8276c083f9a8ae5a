"""What ``calibrate.collectives`` measures and its bounds: names only, so ``--help`` needs no torch."""

from __future__ import annotations

from simcore.errors import TrainsimError

__all__ = [
    "DEFAULT_OPS",
    "DTYPE_NAMES",
    "GROUPS",
    "MAX_AFTER_COMPUTE_MS",
    "MAX_ITERS",
    "MAX_REPEATS",
    "OPS",
    "sweep_sizes",
]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv", "alltoall")
DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
GROUPS = ("world", "intra", "inter")
DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")  # torch's names: the sweep's --dtype
MAX_ITERS = 1_000_000  # per size and repeat: far past any useful sweep, short of a run that never ends
MAX_REPEATS = 1_000_000  # an "endless" sweep that a time limit or scancel ends is legitimate
MAX_AFTER_COMPUTE_MS = 60_000  # --after-compute-ms: a minute, far past a layer's compute between collectives


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' ``-b/-e/-f`` sizes: ``min_bytes * factor**k`` up to ``max_bytes``."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise TrainsimError(f"sizes: need 1 <= -b ({min_bytes}) <= -e ({max_bytes})")
    if factor < 2:
        raise TrainsimError(f"-f must be an integer factor of at least 2, got {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes
