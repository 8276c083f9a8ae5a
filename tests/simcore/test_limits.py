"""Size bounds and physical ranges: the data file is complete, and shipped data lies inside it."""

from __future__ import annotations

import math

import pytest

from simcore.errors import TrainsimError
from simcore.hardware import device_names, device_spec
from simcore.limits import GPUS_PER_CLUSTER, check_physical, physical_range

RANGES = (
    "link_bandwidth",
    "nic_port",
    "link_latency",
    "nvlinks",
    "peak_flops",
    "gpu_memory",
    "cpu_memory",
    "gpu_memory_bandwidth",
    "cpu_memory_bandwidth",
    "oversubscription",
    "nics_per_leaf",
)


@pytest.mark.parametrize("name", RANGES)
def test_every_range_is_finite_ordered_and_sourced(name):
    r = physical_range(name)
    assert 0 <= r.low <= r.high and math.isfinite(r.high)
    assert r.why and r.source and r.what


def test_nvlinks_stop_at_the_h100s_eighteen():
    assert physical_range("nvlinks").high == 18
    assert "H100" in physical_range("nvlinks").source


def test_an_out_of_range_value_names_where_the_range_and_the_source():
    with pytest.raises(TrainsimError) as info:
        check_physical("link_bandwidth", 1e-300, "spec.yaml: links.pcie.bandwidth", "1e-300GB/s")
    message = str(info.value)
    assert message.startswith(
        "spec.yaml: links.pcie.bandwidth: 1e-300GB/s is outside the physical range 1Mb/s"
    )
    assert "(source: NVIDIA Blackwell datasheet" in message
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(TrainsimError):
            check_physical("link_latency", bad, "x")


def test_a_bound_says_how_many_were_asked_for_and_why():
    with pytest.raises(
        TrainsimError, match=r"f: 2 x box gives 70,000 GPUs \(ranks\) in one cluster; at most 65,536"
    ):
        GPUS_PER_CLUSTER.check(70_000, "f", "2 x box")
    assert GPUS_PER_CLUSTER.check(65_536, "f") == 65_536


@pytest.mark.parametrize("name", device_names())
def test_shipped_device_specs_lie_inside_their_ranges(name):
    spec = device_spec(name)
    check_physical(f"{spec.kind}_memory", spec.memory_bytes, name)
    check_physical(f"{spec.kind}_memory_bandwidth", spec.memory_bandwidth_Bps, name)
    for rate in spec.peak_flops.values():
        check_physical("peak_flops", rate, name)
