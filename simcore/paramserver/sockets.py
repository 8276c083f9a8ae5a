"""How much of a reply a blocking send leaves to the kernel (``simcore/data/paramserver.yaml``).

A serial server (``PSConfig.serial_replies``: calibrate.train's) sends each reply from its one
thread with a blocking ``dist.send``. Gloo sizes the socket's send buffer to the message, up to
32 MiB, and Linux caps that at ``net.core.wmem_max``; the send returns once the bytes beyond the
buffer have left, so the thread is held for :func:`held_bytes` of the reply and the rest drains
while it takes the next message. Each figure and its source is in the data file.
"""

from __future__ import annotations

import functools

from simcore.data import data_file
from simcore.errors import TrainsimError

__all__ = ["held_bytes", "send_buffer_bytes"]

_DATA_FILE = "paramserver.yaml"


@functools.cache
def _limits() -> tuple[float, float]:
    data = data_file(_DATA_FILE)
    where = f"simcore/data/{_DATA_FILE}"
    try:
        gloo, kernel = float(data["gloo_max_send_buffer_bytes"]), float(data["wmem_max_bytes"])
    except (KeyError, TypeError, ValueError):
        raise TrainsimError(f"{where}: needs numbers gloo_max_send_buffer_bytes and wmem_max_bytes") from None
    if gloo <= 0 or kernel <= 0 or "source" not in data:
        raise TrainsimError(f"{where}: both buffer limits must be > 0, with a source")
    return gloo, kernel


def send_buffer_bytes(size_bytes: float) -> float:
    """The send buffer gloo asks for a ``size_bytes`` message, as the kernel grants it."""
    gloo, kernel = _limits()
    return min(size_bytes, gloo, kernel)


def held_bytes(size_bytes: float) -> float:
    """The bytes of a ``size_bytes`` reply that must leave before a blocking send returns."""
    return max(0.0, size_bytes - send_buffer_bytes(size_bytes))
