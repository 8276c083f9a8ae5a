"""Each rank's compute speed on its own device: one gradient priced per distinct device.

A mixed cluster (A100 and A10G nodes) has ranks whose forward + backward take different times;
these functions price a gradient with :class:`simcore.compute.roofline.ComputeModel` on every distinct
device once per topology (kept with it), so a what-if that prices the same gradient for many modes
pays for it once per cluster size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcore.compute.power import power_capped
from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_spec

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = ["device_gradient_time_s", "rank_compute_times", "rank_speed_factors"]


def device_gradient_time_s(
    device: str,
    workload: Workload,
    dtype: str,
    micro_batch: int,
    *,
    accumulation: int = 1,
    recompute: bool = False,
    calibration: CalibrationProfile | None = None,
    memo: dict[tuple[object, ...], tuple[object, float]] | None = None,
    software_era: str = "current",
    power_limit_w: float | None = None,
) -> float:
    """Seconds of forward + backward (+ recompute) of ``accumulation`` micro-batches on ``device``.

    ``memo``: where the caller keeps one gradient per (device, workload, dtype, micro-batch,
    recompute, calibration, software era); the functions below keep it with the topology, so a
    what-if that prices the same gradient for every parameter-server mode pays for it once per cluster.
    ``software_era``: the convolution library's era (:class:`~simcore.compute.roofline.ComputeModel`);
    ``power_limit_w``: a board power limit on a GPU (:func:`simcore.compute.power.power_capped`).
    """
    key = (device, workload, dtype, micro_batch, recompute, id(calibration), software_era, power_limit_w)
    hit = memo.get(key) if memo is not None else None
    if hit is None or hit[0] is not calibration:
        spec = device_spec(device)
        spec = power_capped(spec, power_limit_w) if spec.kind == "gpu" else spec
        model = ComputeModel(spec, dtype, calibration, software_era=software_era)
        seconds = sum(model.phase_time_s(workload, micro_batch, phase) for phase in ("fwd", "bwd"))
        if recompute:
            seconds += model.phase_time_s(workload, micro_batch, "recompute")
        hit = (calibration, seconds)
        if memo is not None:
            memo[key] = hit
    return hit[1] * accumulation


def _memo(topology: Topology) -> dict[tuple[object, ...], tuple[object, float]]:
    return topology.derived("gradient_times", dict)


def rank_compute_times(
    topology: Topology,
    workload: Workload,
    dtype: str,
    micro_batch: int,
    *,
    accumulation: int = 1,
    recompute: bool = False,
    calibration: CalibrationProfile | None = None,
    software_era: str = "current",
    power_limit_w: float | None = None,
) -> np.ndarray:
    """Seconds for one gradient (``accumulation`` micro-batches of forward + backward) on each rank's device.

    Each distinct device is priced once with :class:`simcore.compute.roofline.ComputeModel`.
    """
    import numpy as np

    by_device: dict[str, float] = {}
    times = np.empty(topology.world_size)
    for rank in range(topology.world_size):
        name = topology.gpu_spec_name(rank) or "cpu"
        if name not in by_device:
            by_device[name] = device_gradient_time_s(
                name,
                workload,
                dtype,
                micro_batch,
                accumulation=accumulation,
                recompute=recompute,
                calibration=calibration,
                memo=_memo(topology),
                software_era=software_era,
                power_limit_w=power_limit_w,
            )
        times[rank] = by_device[name]
    return times


def rank_speed_factors(
    topology: Topology,
    workload: Workload,
    dtype: str,
    micro_batch: int,
    *,
    reference: str | None = None,
    recompute: bool = False,
    calibration: CalibrationProfile | None = None,
) -> np.ndarray:
    """Each rank's compute time relative to ``reference``'s (a device name; default rank 0's device)."""
    times = rank_compute_times(
        topology, workload, dtype, micro_batch, recompute=recompute, calibration=calibration
    )
    if reference is None:
        return times / times[0]
    ref = device_gradient_time_s(
        reference, workload, dtype, micro_batch, recompute=recompute, calibration=calibration,
        memo=_memo(topology),
    )  # fmt: skip
    return times / ref
