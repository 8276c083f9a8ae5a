"""The one check every command taking ``--calibration`` makes before it simulates with a profile.

A profile describes the devices and fabric it was measured on; the topology says what is simulated.
:func:`check_profile_for` refuses a topology the profile cannot describe, with one line naming the
mismatch:

- every rank's device kind and GPU model, and the ranks per node, must be the measured ones
  (:meth:`CalibrationProfile.check_against`, applied to each distinct GPU model of the topology);
- the measured peak FLOP/s per dtype and memory bandwidth must be physically possible on the
  topology's GPU: at most the ``efficiency`` range (``simcore/data/calibration_ranges.yaml``) of
  its datasheet figures (``simcore/data/devices.yaml``). CPU ranks have placeholder datasheet
  figures, so only the profile's own ranges apply to them.

The rank and node counts may differ from the measured ones: compute fits hold per device, and a
collective fit is used where the simulated group has the measured (op, ranks, scope); every other
collective is simulated on the topology's fabric.
"""

from __future__ import annotations

from simcore.calibration.profile import CalibrationProfile, ProfileError, same_gpu_model
from simcore.calibration.ranges import DATA_FILE, physical_range
from simcore.hardware import device_spec
from simcore.topology import Topology

__all__ = ["check_profile_for"]


def check_profile_for(profile: CalibrationProfile, topology: Topology) -> None:
    """ProfileError (one line) when ``profile`` cannot describe ``topology``; see the module docstring."""
    profile.check_against(topology, strict=False)
    for spec_name in sorted({topology.gpu_spec_name(r) for r in range(topology.world_size)} - {""}):
        measured_on = profile.cluster.device_name
        if measured_on and not same_gpu_model(spec_name, measured_on):
            raise ProfileError(f"calibration profile measured on {measured_on!r} does not describe the "
                               f"{spec_name} GPUs of topology {topology.name!r}")  # fmt: skip
        _check_efficiency(profile, spec_name, topology.name)


def _check_efficiency(profile: CalibrationProfile, spec_name: str, topology_name: str) -> None:
    """Measured peaks at most the ``efficiency`` range's share of the device's datasheet figures."""
    spec = device_spec(spec_name)
    if spec.kind == "cpu":  # placeholder figures (devices.yaml): a real CPU may beat them by any factor
        return
    limit = physical_range("efficiency")
    measured: list[tuple[str, float | None, float | None, str]] = [
        (f"compute.dtypes.{d}.peak_flops", c.peak_flops, spec.peak_flops.get(d), "FLOP/s")
        for d, c in profile.compute.items()
    ]
    measured.append(
        ("compute.memory_bandwidth_Bps", profile.memory_bandwidth_Bps, spec.memory_bandwidth_Bps, "B/s")
    )
    for key, value, datasheet, unit in measured:
        if value is None or not datasheet or value / datasheet <= limit.high:
            continue
        raise ProfileError(
            f"calibration profile {key}: {value:.3g} {unit} is {value / datasheet:.2f}x the datasheet figure of "
            f"{spec_name} in topology {topology_name!r} ({datasheet:.3g} {unit}, simcore/data/devices.yaml), above "
            f"the physical range {limit.low:g} .. {limit.high:g} ({limit.source}; {DATA_FILE})"
        )
