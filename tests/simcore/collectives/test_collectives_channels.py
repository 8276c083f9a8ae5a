"""NCCL's channel tuning by size (src/enqueue.cc topoGetAlgoInfo): fewer channels for small messages.

NCCL drops a channel while bytes < nChannels x nThreads x threadThreshold: Simple 512 threads x 64 B
(32 KiB per channel), LL128 640 x 8 B (5 KiB), LL 512 x 8 B, times the rank count on a ring (64 KiB
per channel for 16 ranks). The counts below are worked by hand from those figures.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.collectives import price
from simcore.collectives.tuning import size_channels
from topologies import load_cluster

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize(
    ("pattern", "proto", "ranks", "size", "expected"),
    [
        ("ring", "Simple", 16, 1 * MiB, 32),  # 1 MiB / 32 KiB = 32: all 32 channels
        ("ring", "Simple", 16, 256 * KiB, 8),  # 256 KiB / 32 KiB
        ("ring", "Simple", 16, 8, 1),  # never fewer than one
        ("ring", "LL", 16, 1 * MiB, 16),  # LL on a ring: 512 x 8 B x 16 ranks = 64 KiB per channel
        ("ring", "LL", 2, 1 * MiB, 32),  # 2 ranks: 8 KiB per channel
        ("tree", "LL", 16, 1 * MiB, 32),  # a tree's LL threshold is not scaled by the ranks
        ("tree", "LL128", 16, 40 * KiB, 8),  # 640 x 8 B = 5 KiB per channel
        ("chain", "Simple", 8, 64 * KiB, 2),
        ("nvls", "Simple", 8, 8, 32),  # NVLS keeps its own count
        ("p2p", "Simple", 8, 8, 32),
    ],
)
def test_channels_by_size_follow_nccls_thread_thresholds(
    pattern: str, proto: str, ranks: int, size: int, expected: int
) -> None:
    assert size_channels(32, pattern, proto, ranks, size) == expected


@given(st.integers(1, 32), st.sampled_from(["ring", "tree", "chain"]), st.sampled_from(["LL", "LL128", "Simple"]),
       st.integers(2, 64), st.integers(1, 1 << 31))  # fmt: skip
def test_channels_grow_with_size_between_one_and_all(
    channels: int, pattern: str, proto: str, ranks: int, size: int
) -> None:
    got = size_channels(channels, pattern, proto, ranks, size)
    assert 1 <= got <= channels
    assert got <= size_channels(channels, pattern, proto, ranks, 2 * size)


def test_ll128_ring_cap_counts_the_channels_run_for_the_size() -> None:
    """One H100 node, ring LL128 at 20 KiB: 4 of its 24 channels (20 KiB / 5 KiB), each capped at
    NCCL's 36.7 GB/s (perChMaxRingLL128Bws, Hopper), on the bus bandwidth: the time the cap alone needs is
    size / (4 x 36.7 GB/s x nRanks / nSteps)."""
    topo = load_cluster("hgx-h100")
    size = 20 * KiB
    got = price(topo, "all_reduce", size, algorithm="ring", protocol="LL128")
    expected = size / (4 * 36.7e9 * 8 / 14)
    assert got.costs[0].engine_s == pytest.approx(expected, rel=1e-12)


def test_tree_cap_counts_the_channels_run_for_the_size() -> None:
    """Two p4de nodes (4 EFA NICs: 8 channels), tree Simple at 64 KiB: 64 KiB / 32 KiB = 2 channels,
    each capped at Ampere's 23.6 GB/s across 2 nodes (perChMaxTreeBws); a tree's cap is on twice
    its algorithm bandwidth (ratio 0.5)."""
    topo = load_cluster("p4de.24xlarge", nodes=2)
    size = 64 * KiB
    got = price(topo, "all_reduce", size, algorithm="tree", protocol="Simple")
    assert got.info.channels == 8
    assert got.costs[0].engine_s == pytest.approx(size / (2 * 23.6e9 * 0.5), rel=1e-12)
