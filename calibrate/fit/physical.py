"""Fits that come out physically impossible are left out of a profile, each with a warning.

A least-squares fit always returns numbers, but not always meaningful ones: a sweep of messages too
small for the bandwidth to show (8 B .. 4 KiB over loopback) leaves the slope undetermined, and the
fitted bus bandwidth can land at 1e18 B/s. Such a fit is dropped (the simulator then simulates that
collective on the topology's fabric) with one ``warning:`` line naming it and the range it broke
(:mod:`simcore.calibration.ranges`), so every profile ``calibrate.fit`` writes is one
:func:`simcore.calibration.profile_json.load_profile` accepts.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping

from simcore.calibration.profile import CalibrationProfile, CollectiveFit, ProfileError
from simcore.calibration.ranges import physical_range

__all__ = ["keep_physical"]


def _ok(checks: list[tuple[str, float]], name: str, warn: Callable[[str], None]) -> bool:
    try:
        for range_name, value in checks:
            physical_range(range_name).check(value, name)
    except ProfileError as exc:
        warn(f"{exc}; this fit is left out of the profile (measure sizes where it shows)")
        return False
    return True


def _print_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _physical_collectives(
    fits: Mapping[tuple[str, int, str], CollectiveFit], when: str, warn: Callable[[str], None]
) -> dict[tuple[str, int, str], CollectiveFit]:
    return {
        key: fit for key, fit in fits.items()
        if _ok([("latency_s", fit.alpha_s), ("bandwidth_Bps", fit.busbw_Bps)], f"{key[0]}/{key[1]}/{key[2]}{when}", warn)
    }  # fmt: skip


def keep_physical(
    profile: CalibrationProfile, warn: Callable[[str], None] = _print_warning
) -> CalibrationProfile:
    """``profile`` without the fits whose numbers lie outside their physical ranges."""
    collectives = _physical_collectives(profile.collectives, "", warn)
    after_compute = _physical_collectives(profile.after_compute, " after compute", warn)
    compute = {
        dtype: curve for dtype, curve in profile.compute.items()
        if _ok([("peak_flops", curve.peak_flops), ("half_flops", curve.half_flops)], f"compute/{dtype}", warn)
    }  # fmt: skip
    overheads = {
        phase: seconds for phase, seconds in profile.op_overhead_s.items()
        if _ok([("op_overhead_s", seconds)], f"op overhead/{phase}", warn)
    }  # fmt: skip
    memory, slowdown = profile.memory_bandwidth_Bps, profile.comm_compute_slowdown
    if memory is not None and not _ok([("bandwidth_Bps", memory)], "memory bandwidth", warn):
        memory = None
    if slowdown is not None and not _ok([("comm_compute_slowdown", slowdown)], "comm/compute slowdown", warn):
        slowdown = None
    return dataclasses.replace(profile, collectives=collectives, after_compute=after_compute, compute=compute,
                               op_overhead_s=overheads,
                               memory_bandwidth_Bps=memory, comm_compute_slowdown=slowdown)  # fmt: skip
