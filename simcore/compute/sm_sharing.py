"""How much slower compute runs while a collective's NCCL kernel holds some of the GPU's SMs.

NCCL runs one thread block per channel, each holding an SM for the whole collective and sharing it
with no other kernel (NVIDIA/nccl#689, maintainer: "NCCL CTAs won't share an SM with compute
kernels"). A compute kernel launched beside it has ``sms - channels`` SMs:

- a kernel of many short blocks (Ampere's cuBLAS GEMMs, whose grid is one block per output tile;
  FlashAttention; the elementwise and reduction kernels) spreads over the SMs left and runs
  ``sms / (sms - channels)`` times slower (:func:`free_sm_slowdown`);
- a *persistent* GEMM launches one block per SM, each working through a fixed share of the output
  tiles (CUTLASS's Hopper tile scheduler hands block ``b`` the tiles ``b, b + grid, b + 2 grid, ...``,
  include/cutlass/gemm/kernel/sm90_tile_scheduler.hpp). With ``channels`` SMs taken, only
  ``sms - channels`` of its blocks are resident; the others start when the first ones finish their
  whole share, so the GEMM takes ``ceil(grid / (sms - channels))`` times as long: twice, for any
  channel count up to half the SMs (:func:`persistent_gemm_waves`). PyTorch's maintainers measured
  exactly that under FSDP on H100: "the matmuls take 2x as long to complete when they are overlapped
  with a NCCL kernel ... all the matmuls look like they are using persistent kernels ... they launch
  as many CUDA blocks as there are SMs on the GPU (i.e., 132)" (pytorch/pytorch#143988; the
  ``sm_carveout`` knob of PR #144974 / #147966, "this wave quantization can double the latency of
  the matmul kernels", exists to avoid it and is off by default).

The devices whose cuBLAS GEMMs are persistent are listed in ``data/efficiency.yaml``
(``contention.persistent_gemm``). A collective slows the compute beside it by the work-weighted
mean of the two stretches over the step's kernels (:func:`overlap_slowdown`).
"""

from __future__ import annotations

import fnmatch
import functools
from typing import TYPE_CHECKING, Any

from simcore.data import data_file
from simcore.errors import TrainsimError

# numpy: imported inside the function that uses it, so --help does not load it
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "GEMM_TILE",
    "free_sm_slowdown",
    "gemm_tiles",
    "overlap_slowdown",
    "persistent_gemm_waves",
    "persistent_gemm_waves_of",
    "runs_persistent_gemms",
]

# output tile edge of large cuBLAS/CUTLASS GEMMs (NVIDIA Deep Learning Performance Guide, "Matrix
# Multiplication Background": tile quantisation), as the compute model's wave quantisation counts them
GEMM_TILE = 128


@functools.lru_cache(maxsize=1)
def _persistent_patterns() -> tuple[str, ...]:
    return tuple(str(p) for p in data_file("efficiency.yaml")["contention"].get("persistent_gemm", []))


def runs_persistent_gemms(device: str) -> bool:
    """Whether ``device``'s cuBLAS GEMMs launch one persistent block per SM (``efficiency.yaml``,
    ``contention.persistent_gemm``: shell-style patterns on the device spec name)."""
    return any(fnmatch.fnmatchcase(device, p) for p in _persistent_patterns())


def _check(sms: int, channels: float) -> None:
    if sms <= 0 or not 0 <= channels < sms:
        raise TrainsimError(f"SM sharing needs sms > 0 and 0 <= channels < sms, got {sms} and {channels}")


def free_sm_slowdown(sms: int, channels: float) -> float:
    """Slowdown of a kernel of many short blocks on the ``sms - channels`` SMs a collective leaves."""
    _check(sms, channels)
    return sms / (sms - channels)


def gemm_tiles(rows: Any, cols: Any) -> Any:
    """Output tiles of ``rows x cols`` GEMM outputs (:data:`GEMM_TILE` square tiles; numbers or
    arrays, element by element)."""
    import numpy as np

    return np.ceil(np.divide(rows, GEMM_TILE)) * np.ceil(np.divide(cols, GEMM_TILE))


def persistent_gemm_waves(tiles: Any, sms: int, channels: float) -> Any:
    """Time of a persistent GEMM of ``tiles`` output tiles beside a collective holding ``channels``
    SMs, over its time alone: its grid (one block per SM, fewer when it has fewer tiles; a NaN tile
    count, an unknown shape, fills every SM) in waves of the ``sms - channels`` SMs left; 1 when
    every block is resident. Numbers or arrays, element by element."""
    import numpy as np

    _check(sms, channels)
    grid = np.where(np.isnan(tiles), float(sms), np.clip(tiles, 1.0, float(sms)))
    return np.ceil(grid / (sms - channels))


def persistent_gemm_waves_of(rows: np.ndarray, cols: np.ndarray, sms: int, channels: float) -> np.ndarray:
    """:func:`persistent_gemm_waves` of GEMMs with ``rows x cols`` outputs (:func:`gemm_tiles`)."""
    return persistent_gemm_waves(gemm_tiles(rows, cols), sms, channels)


def overlap_slowdown(
    persistent_s: float, stretched_s: float, other_s: float, sms: int, channels: float
) -> float:
    """Slowdown of the step's compute beside a collective holding ``channels`` SMs: its persistent
    GEMMs' ``persistent_s`` seconds taking ``stretched_s`` (their waves), the other ``other_s``
    seconds :func:`free_sm_slowdown` times longer; the work-weighted mean of the two."""
    total = persistent_s + other_s
    if total <= 0:
        return free_sm_slowdown(sms, channels)
    return (stretched_s + other_s * free_sm_slowdown(sms, channels)) / total
