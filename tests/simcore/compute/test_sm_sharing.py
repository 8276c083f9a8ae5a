"""Compute beside a collective's NCCL kernel: the SM rule and Hopper's persistent GEMMs, by hand.

A persistent GEMM launches one block per SM (132 on an H100); with 16 SMs held by NCCL's channels
116 blocks run, the other 16 start when those finish their whole share of tiles: two waves, twice
the time (pytorch/pytorch#143988). Kernels of many short blocks slow by 132 / 116.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.sm_sharing import (
    free_sm_slowdown,
    gemm_tiles,
    overlap_slowdown,
    persistent_gemm_waves,
    persistent_gemm_waves_of,
    runs_persistent_gemms,
)
from simcore.errors import TrainsimError

H100_SMS = 132  # NVIDIA H100 SXM5: 132 SMs (H100 whitepaper)


@pytest.mark.parametrize(
    ("tiles", "channels", "waves"),
    [
        (1024, 16, 2),  # a Llama GEMM (8192 x 2048 outputs = 64 x 16 tiles): the grid is 132 blocks
        (132, 16, 2),  # one full wave alone: 116 resident, 16 later
        (117, 16, 2),  # one block too many for the 116 SMs left
        (116, 16, 1),  # every block resident: no second wave
        (40, 24, 1),  # a small GEMM beside NVSwitch's 24 channels
        (1024, 0, 1),  # nothing beside it
        (1024, 70, 3),  # more than half the SMs taken: 132 blocks on 62 SMs, three waves
    ],
)
def test_persistent_gemm_waves_by_hand(tiles: int, channels: int, waves: int) -> None:
    assert persistent_gemm_waves(tiles, H100_SMS, channels) == waves


def test_the_tiles_of_a_llama_gemm() -> None:
    # llama2-7b q projection at micro-batch 2 x 4096 tokens: 8192 x 4096 outputs, 128-square tiles
    assert gemm_tiles(8192, 4096) == 64 * 32
    assert gemm_tiles(129, 1) == 2  # a partial tile counts whole


def test_free_sm_rule_by_hand() -> None:
    assert free_sm_slowdown(H100_SMS, 16) == pytest.approx(132 / 116)
    assert free_sm_slowdown(108, 0) == 1.0


def test_overlap_slowdown_is_the_work_weighted_mean() -> None:
    # 3 s of persistent GEMMs taking 6 s (two waves) and 1 s of other kernels at 132/116
    expected = (6.0 + 1.0 * 132 / 116) / 4.0
    assert overlap_slowdown(3.0, 6.0, 1.0, H100_SMS, 16) == pytest.approx(expected)
    # no GEMMs: the SM rule; no work at all: the SM rule too
    assert overlap_slowdown(0.0, 0.0, 2.0, H100_SMS, 16) == pytest.approx(132 / 116)
    assert overlap_slowdown(0.0, 0.0, 0.0, H100_SMS, 16) == pytest.approx(132 / 116)


@pytest.mark.parametrize(
    ("device", "persistent"),
    [("h100-sxm", True), ("h200-sxm", True), ("gh200", True), ("h800", True), ("h20", True),
     ("h100-pcie", True), ("a100-sxm-80gb", False), ("b200", False), ("v100-sxm2-32gb", False)],
)  # fmt: skip
def test_which_devices_run_persistent_gemms(device: str, persistent: bool) -> None:
    assert runs_persistent_gemms(device) is persistent


@pytest.mark.parametrize(("sms", "channels"), [(0, 0), (132, 132), (132, -1)])
def test_bad_sm_counts_are_refused(sms: int, channels: int) -> None:
    with pytest.raises(TrainsimError, match="SM sharing"):
        free_sm_slowdown(sms, channels)
    with pytest.raises(TrainsimError, match="SM sharing"):
        persistent_gemm_waves(10, sms, channels)


@given(
    persistent=st.floats(0.0, 10.0),
    waves=st.integers(1, 3),
    other=st.floats(0.0, 10.0),
    channels=st.integers(0, 40),
)
def test_the_mean_lies_between_its_parts(persistent: float, waves: int, other: float, channels: int) -> None:
    free = free_sm_slowdown(H100_SMS, channels)
    mixed = overlap_slowdown(persistent, persistent * waves, other, H100_SMS, channels)
    assert min(free, waves) - 1e-12 <= mixed <= max(free, waves) + 1e-12


@given(
    rows=st.integers(1, 40_000),
    cols=st.integers(1, 40_000),
    channels=st.integers(0, 65),
)
def test_the_array_form_is_the_scalar_rule(rows: int, cols: int, channels: int) -> None:
    import numpy as np

    waves = persistent_gemm_waves_of(np.array([rows, np.nan]), np.array([cols, 1.0]), H100_SMS, channels)
    assert waves[0] == persistent_gemm_waves(gemm_tiles(rows, cols), H100_SMS, channels)
    assert waves[1] == persistent_gemm_waves(H100_SMS, H100_SMS, channels)  # unknown shape: every SM
