"""Layer-wise pushes and pulls (MXNet's kvstore, BytePS / P3): where in a gradient each shard's bytes are ready.

A worker does not wait for its whole gradient before pushing: as autograd produces the gradients
of the last layers first, their bytes go out while backward continues (MXNet's dependency engine,
2015; BytePS, Jiang et al. OSDI 2020; P3, Jayarajan et al. MLSys 2019), each part is applied and
pulled back as it arrives (:mod:`simcore.paramserver.worker`), and the next forward pass starts as
soon as the parameters of its first layers are back. The model cuts the layers into
:data:`SEGMENTS` contiguous segments of about equal compute (each layer in the segment that holds
the middle of its compute): a segment's gradient bytes of each shard are pushed when the segment's
backward ends, and the segment's forward waits for its parameters of every shard. Within a segment
nothing overlaps, so the figure is a lower bound on what per-tensor scheduling overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_spec

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.paramserver.layout import ShardLayout
    from simcore.workload.types import Workload

__all__ = ["SEGMENTS", "Segment", "segments"]

SEGMENTS = 4  # segments of a gradient; more would add flows, not insight


@dataclass(frozen=True, slots=True)
class Segment:
    """One contiguous run of layers: its share of forward and backward time and of each shard's bytes."""

    fwd_fraction: float  # of the whole gradient's compute time
    bwd_fraction: float
    shard_fraction: tuple[float, ...]  # of each shard's bytes


def segments(
    workload: Workload,
    layout: ShardLayout,
    device: str,
    dtype: str,
    micro_batch: int,
    calibration: CalibrationProfile | None = None,
) -> tuple[Segment, ...]:
    """The segments of ``workload`` priced on ``device`` (cut where compute reaches each quantile)."""
    import numpy as np

    model = ComputeModel(device_spec(device), dtype, calibration)
    fwd = np.asarray(model.layer_times_s(workload, micro_batch, "fwd"), dtype=float)
    bwd = np.asarray(model.layer_times_s(workload, micro_batch, "bwd"), dtype=float)
    total = float(fwd.sum() + bwd.sum()) or 1.0
    # a layer goes to the segment holding the middle of its compute: cut at the end of each layer,
    # the layer that ends exactly on a quantile would open the next segment and leave the first
    # one empty (3 equal layers: segments {}, {0}, {1, 2} instead of {0}, {1}, {2})
    middle = (np.cumsum(fwd + bwd) - (fwd + bwd) / 2) / total
    count = min(SEGMENTS, len(workload.layers))
    cut = np.minimum((middle * count).astype(int), count - 1)  # segment of each layer
    shard_params = np.asarray(layout.shard_params, dtype=float)
    result = []
    for k in range(count):
        members = cut == k
        per_shard = np.zeros(len(shard_params))
        for index in np.flatnonzero(members):
            shard = layout.layer_shard[index]
            if shard >= 0:
                per_shard[shard] += workload.layers[index].params
        share = np.divide(per_shard, shard_params, out=np.zeros_like(per_shard), where=shard_params > 0)
        result.append(
            Segment(
                float(fwd[members].sum() / total), float(bwd[members].sum() / total), tuple(map(float, share))
            )
        )
    return tuple(result)
