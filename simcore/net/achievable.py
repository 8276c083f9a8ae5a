"""Achievable bandwidth per link class: the fraction of a link's datasheet rate software reaches.

Read from ``simcore/data/links.yaml`` (every figure with its source). Topology builders stamp the
fraction on each link of a GPU cluster as the edge attribute ``efficiency``; the network and the
collective closed forms then run the link at ``bandwidth_Bps * efficiency``
(:func:`simcore.topology.effective_bandwidth`).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.topology import LINK_KINDS

__all__ = ["achievable_fraction", "shm_efficiency"]

_DATA_FILE = "links.yaml"


@functools.cache
def _table() -> Mapping[str, Any]:
    data = data_file(_DATA_FILE)
    where = f"simcore/data/{_DATA_FILE}"
    if not isinstance(data, dict):
        raise TrainsimError(f"{where}: expected a mapping of link kind -> achievable fraction")
    for kind in LINK_KINDS:
        entry = data.get(kind)
        if not isinstance(entry, dict) or "default" not in entry or "source" not in entry:
            raise TrainsimError(f"{where}: link kind {kind!r} needs 'default' and 'source'")
        for value in [entry["default"], *dict(entry.get("gpu", {})).values()]:
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise TrainsimError(f"{where}: {kind}: fraction {value!r} must be in (0, 1]")
    shm = data.get("shm", {})
    if not isinstance(shm, dict) or not 0 < float(shm.get("efficiency", 0)) <= 1:
        raise TrainsimError(f"{where}: 'shm.efficiency' must be in (0, 1]")
    return data


def achievable_fraction(kind: str, gpus: Iterable[str] = ()) -> float:
    """The achievable fraction of a ``kind`` link's rate; ``gpus``: GPU specs at its ends."""
    entry = _table().get(kind)
    if entry is None:
        raise TrainsimError(f"unknown link kind {kind!r}; allowed: {', '.join(LINK_KINDS)}")
    for gpu in gpus:
        for pattern, value in dict(entry.get("gpu", {})).items():
            if fnmatch.fnmatchcase(gpu, pattern):
                return float(value)
    return float(entry["default"])


def shm_efficiency() -> float:
    """Payload fraction of a PCIe path when NCCL stages GPU-to-GPU traffic through host memory."""
    return float(_table()["shm"]["efficiency"])
