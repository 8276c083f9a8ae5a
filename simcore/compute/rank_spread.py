"""The slowest of N ranks: GPUs of one SKU do not sustain the same clock (``data/rank_spread.yaml``).

Every rank of a synchronous step waits for the slowest one at each collective it joins, so N ranks
compute at the slowest of N GPUs drawn from the fleet. Per-GPU speed is normal around the median
GPU (the one whose kernels the efficiency tables measured) with relative spread ``sigma`` (Sinha et
al., SC22); the expected slowest of N is ``1 - sigma * E[max of N standard normals]`` of the median's
speed, so compute-bound kernels take ``1 / (1 - sigma * e_N)`` as long: nothing at N = 1, ~2% at 8
ranks, ~4% at 128, ~5% at 1,024. It stays off where the simulator already draws explicit per-rank
speeds (stragglers, jitter, mixed devices).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from simcore.data import data_file

if TYPE_CHECKING:
    from simcore.hardware import DeviceSpec

__all__ = [
    "expected_max_standard_normal",
    "rank_spread_sigma",
    "slowest_of",
    "slowest_rank_time_factor",
    "spread_ranks",
]

_DATA_FILE = Path(__file__).parent.parent / "data" / "rank_spread.yaml"


@functools.lru_cache(maxsize=1)
def rank_spread_sigma() -> float:
    """Relative spread (standard deviation over the median) of per-GPU speed within one SKU."""
    return float(data_file(_DATA_FILE.name)["relative_sigma"])


def expected_max_standard_normal(n: int) -> float:
    """E[max of ``n`` independent standard normal draws] (0 for n = 1): the order statistic's density
    n phi(x) Phi(x)^(n-1) integrated against x (trapezoid on [-12, 12], error below 1e-9)."""
    if n < 1:
        raise ValueError(f"need at least one draw, got {n}")
    if n == 1:
        return 0.0
    import numpy as np

    x = np.linspace(-12.0, 12.0, 4_801)
    log_cdf = np.array([_log_normal_cdf(v) for v in x.tolist()])
    density = n * np.exp(-0.5 * x * x + (n - 1) * log_cdf) / math.sqrt(2.0 * math.pi)
    f = x * density  # the trapezoid rule on a uniform grid (numpy 1.24 has no np.trapezoid)
    return float((f.sum() - 0.5 * (f[0] + f[-1])) * (x[1] - x[0]))


def _log_normal_cdf(x: float) -> float:
    """log Phi(x) from the standard library's erfc (scipy.special.log_ndtr's split, without the
    ~0.5 s import of scipy.special): below 0 the tail itself, above it log1p of the upper tail, both
    to a few ulps on [-12, 12] (erfc(12 / sqrt 2) ~ 1e-33 is far from underflow)."""
    if x < 0.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    return math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))


def slowest_rank_time_factor(ranks: int) -> float:
    """How much longer a compute-bound kernel takes on the expected slowest of ``ranks`` GPUs."""
    return 1.0 / (1.0 - rank_spread_sigma() * expected_max_standard_normal(max(1, ranks)))


def slowest_of(device: DeviceSpec, ranks: int) -> DeviceSpec:
    """``device`` as the expected slowest of ``ranks`` of its kind: its peak FLOP/s divided by
    :func:`slowest_rank_time_factor` (``device`` itself for one rank or a CPU)."""
    if ranks <= 1 or device.kind != "gpu":
        return device
    factor = slowest_rank_time_factor(ranks)
    return replace(device, peak_flops=MappingProxyType({k: v / factor for k, v in device.peak_flops.items()}))


def spread_ranks(enabled: bool, world_size: int, *, explicit_speeds: bool) -> int:
    """How many ranks' spread gates a synchronous step: ``world_size``, or 1 (no penalty) when the
    rule is turned off or the simulation draws explicit per-rank speeds instead."""
    return world_size if enabled and not explicit_speeds else 1
