"""Host synchronisations of the frameworks' training loops (``data/host_syncs.yaml``).

A ``tensor.item()`` (the loss for logging, ``clip_grad_norm_``'s total norm) blocks the host until
the GPU queue drains; afterwards the device idles while the host dispatches the next operator, until
the host is ahead again. Each sync so exposes one operator dispatch plus one kernel launch.
"""

from __future__ import annotations

import functools
from pathlib import Path

from simcore.data import data_file
from simcore.errors import TrainsimError

__all__ = ["host_sync_time_s", "launch_latency_s", "syncs_per_step"]

_DATA_FILE = Path(__file__).parent.parent / "data" / "host_syncs.yaml"


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict[str, float], float]:
    data = data_file(_DATA_FILE.name)
    return {str(k): float(v) for k, v in data["syncs_per_step"].items()}, float(data["launch_latency_s"])


def syncs_per_step(framework: str) -> float:
    """Host syncs per step of ``framework``'s reference training loop."""
    table = _table()[0]
    if framework not in table:
        raise TrainsimError(f"host_syncs.yaml has no framework {framework!r}; known: {', '.join(table)}")
    return table[framework]


def launch_latency_s() -> float:
    """Seconds from a kernel's launch to its start on an idle GPU."""
    return _table()[1]


def host_sync_time_s(syncs: float, host_op_s: float, *, device_kind: str = "gpu") -> float:
    """Exposed seconds of ``syncs`` host syncs, each one operator dispatch (``host_op_s``) plus a
    launch; none on a CPU rank, whose host does the arithmetic itself (there is no queue to drain)."""
    if device_kind == "cpu" or syncs <= 0:
        return 0.0
    return syncs * (host_op_s + launch_latency_s())
