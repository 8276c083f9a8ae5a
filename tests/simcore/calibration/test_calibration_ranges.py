"""Physical ranges on every calibrated number, and the one compatibility check of a profile with the
cluster a command simulates (the same for ``nccl_sim`` and ``what_if``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import simcore.calibration.profile as cal
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile, profile_to_json
from simcore.calibration.ranges import DATA_FILE, physical_range
from tests.paths import REPO
from topologies import load_cluster


def _profile(**overrides: object) -> cal.CalibrationProfile:
    fields: dict[str, object] = {
        "cluster": cal.ClusterDescription("nccl", "gpu", "NVIDIA A100-SXM4-80GB", 16, 8, 2),
        "collectives": {
            ("all_reduce", 8, "intra_node"): cal.CollectiveFit("all_reduce", 8, "intra_node", 12e-6, 230e9)
        },
        "compute": {"bf16": cal.ComputeCurve("bf16", 250e12, 4e9)},
        "memory_bandwidth_Bps": 1.7e12,
    }
    fields.update(overrides)
    return cal.CalibrationProfile(**fields)  # type: ignore[arg-type]


def _load(tmp_path: Path, data: object) -> cal.CalibrationProfile:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return load_profile(path)


def test_a_vanishing_bus_bandwidth_is_refused_with_its_range_and_source(tmp_path: Path) -> None:
    data = profile_to_json(_profile())
    data["collectives"][0]["busbw_Bps"] = 1e-300  # what_if once printed nan step times from this
    with pytest.raises(cal.ProfileError) as refused:
        _load(tmp_path, data)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'profile.json'}.collectives[0].busbw_Bps: 1e-300 B/s is outside")
    assert "physical range 1000 .. 1e+14 B/s (" in message and message.endswith(f"; {DATA_FILE})")


@pytest.mark.parametrize(
    ("name", "inside", "outside"),
    [("bandwidth_Bps", 2.3e11, 1e15), ("latency_s", 1.2e-5, 11.0), ("peak_flops", 3e14, 1e18),
     ("half_flops", 4e9, 1e19), ("comm_compute_slowdown", 1.07, 0.99), ("op_overhead_s", 2e-5, 1e-10),
     ("ranks", 16, 2_000_000), ("threads", 8, 0), ("efficiency", 0.8, 1.2)],
)  # fmt: skip
def test_every_range_takes_measured_values_and_refuses_absurd_ones(
    name: str, inside: float, outside: float
) -> None:
    bound = physical_range(name)
    assert bound.check(inside, "x") == inside
    for bad in (outside, float("nan"), float("inf")):
        with pytest.raises(cal.ProfileError, match=rf"x: .* is outside the physical range .*{DATA_FILE}"):
            bound.check(bad, "x")
    assert bound.source and bound.unit


def test_the_shipped_captures_and_published_levels_are_inside_the_ranges(tmp_path: Path) -> None:
    """The α–β levels the test captures were made from (7 us .. 95 us, 1.1 .. 362 GB/s) and the
    datasheet peaks of every device are plausible by these ranges."""
    from simcore.hardware import device_names, device_spec

    for busbw in (1.12e9, 362e9):
        physical_range("bandwidth_Bps").check(busbw, "busbw")
    for alpha in (7e-6, 95e-6):
        physical_range("latency_s").check(alpha, "alpha")
    for name in device_names():
        spec = device_spec(name)
        physical_range("bandwidth_Bps").check(spec.memory_bandwidth_Bps, name)
        for rate in spec.peak_flops.values():
            physical_range("peak_flops").check(rate, name)


def test_one_check_for_every_command() -> None:
    """Device kind and model and ranks per node must match; rank and node counts may differ."""
    profile = _profile()
    check_profile_for(profile, load_cluster("dgx-a100", gpus=16))
    check_profile_for(profile, load_cluster("dgx-a100", gpus=64))  # more nodes of the same kind
    with pytest.raises(
        cal.ProfileError, match=r"measured on 'NVIDIA A100-SXM4-80GB'; topology 'hgx-h100-x2' has 'h100-sxm'"
    ):
        check_profile_for(profile, load_cluster("hgx-h100", gpus=16))
    with pytest.raises(cal.ProfileError, match="8 ranks per node"):
        check_profile_for(profile, load_cluster("dgx-a100", gpus=4))


def test_a_profile_faster_than_the_datasheet_is_refused() -> None:
    a100 = load_cluster("dgx-a100", gpus=16)
    check_profile_for(_profile(compute={"bf16": cal.ComputeCurve("bf16", 300e12, 4e9)}), a100)  # 96 % of 312
    with pytest.raises(
        cal.ProfileError, match=r"bf16.peak_flops: 9e\+14 FLOP/s is 2.88x the datasheet figure"
    ):
        check_profile_for(_profile(compute={"bf16": cal.ComputeCurve("bf16", 900e12, 4e9)}), a100)
    with pytest.raises(cal.ProfileError, match=r"memory_bandwidth_Bps: 8e\+12 B/s is 3.92x"):
        check_profile_for(_profile(memory_bandwidth_Bps=8e12), a100)


def test_a_cpu_profile_may_beat_the_placeholder_figures() -> None:
    """CPU ranks have placeholder datasheet figures (devices.yaml): a real server measures more DRAM
    bandwidth and FLOP/s than they say, so only the profile's own ranges apply (CI once refused a
    72 GB/s measurement against the 50 GB/s placeholder)."""
    cpu = load_cluster(str(REPO / "topologies" / "examples" / "cpu-loopback.yaml"))
    measured = load_profile(REPO / "experiments" / "results" / "validation" / "profile.json")
    check_profile_for(dataclasses.replace(measured, memory_bandwidth_Bps=3 * 50e9), cpu)


def test_a_mixed_cluster_is_refused_for_the_model_the_profile_did_not_measure() -> None:
    """Rank 0 is an A100 like the profile's, but the cluster's g5 nodes run A10Gs: refused."""
    mixed = load_cluster(str(REPO / "topologies" / "examples" / "mixed-dgx-g5.yaml"))
    with pytest.raises(cal.ProfileError, match="does not describe the a10g GPUs of topology 'mixed-dgx-g5'"):
        check_profile_for(_profile(), mixed)
