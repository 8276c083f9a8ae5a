"""Pipeline fill: NCCL's chunk sizes, the fill's growth with the chunk, and platform NCCL settings."""

from __future__ import annotations

import pytest

from simcore.collectives import NcclOptions, price
from simcore.collectives.group import GroupInfo
from simcore.collectives.pipeline import chunk_bytes, fill_s
from simcore.collectives.plan import Hops, Phase
from simcore.errors import TrainsimError
from topologies import load_cluster

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _info(**kw: object) -> GroupInfo:
    base = dict(ranks=16, nodes=2, ppn=8, backend="nccl", arch="ampere", nics=4)
    base.update(kw)
    return GroupInfo(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "buffsize", "chunk"),
    # NCCL calcCollChunking: a Simple tree moves one buffer slot (NCCL_BUFFSIZE / 8) per chunk at any
    # size (no halving loop: those are CollNet's); a channel's share caps it (8 channels here).
    [
        (16 * MiB, 0, 512 * KiB),
        (GiB, 0, 512 * KiB),
        (16 * MiB, 8 * MiB, MiB),
        (128 * MiB, 8 * MiB, MiB),
        (MiB, 0, 512 * KiB),
    ],
)
def test_tree_simple_chunk_is_one_buffer_slot(size: int, buffsize: int, chunk: int) -> None:
    assert chunk_bytes("tree", "Simple", size, _info(buffsize=buffsize)) == chunk


def test_tree_simple_fill_uses_at_most_a_channels_share() -> None:
    """1 MiB on 8 channels: 128 KiB each, below the 512 KiB slot; the fill streams 128 KiB chunks."""
    topo = load_cluster("dgx-a100", gpus=16)
    one, two = (price(topo, "all_reduce", s, algorithm="tree", protocol="Simple") for s in (MiB, 2 * MiB))
    eight_b = price(topo, "all_reduce", 8, algorithm="tree", protocol="Simple").costs[0].latency_s
    # the fill (latency above the 8-byte one) doubles with the per-channel chunk while it is below a slot
    assert (two.costs[0].latency_s - eight_b) == pytest.approx(
        2 * (one.costs[0].latency_s - eight_b), rel=1e-4
    )


def test_nvls_tree_chunks_drop_at_nccls_thresholds_and_obey_the_platform_cap() -> None:
    hopper = _info(arch="hopper", nics=32)  # 16 NVLS channels x 8 heads = 128 operations
    assert chunk_bytes("nvls_tree", "Simple", 16 * MiB, hopper) == 64 * KiB
    assert chunk_bytes("nvls_tree", "Simple", 16 * GiB, hopper) == 128 * KiB
    big = _info(arch="hopper", nics=32, nvls_chunk=512 * KiB, nvls_tree_max_chunk=512 * KiB)
    assert chunk_bytes("nvls_tree", "Simple", 16 * GiB, big) == 512 * KiB
    assert chunk_bytes("nvls_tree", "Simple", 128 * MiB, big) == 128 * KiB


def test_fill_is_one_slot_deep_once_a_channel_holds_a_slot_and_a_small_share_of_large_messages() -> None:
    topo = load_cluster("dgx-a100", gpus=16)
    small, large = (
        price(topo, "all_reduce", s, algorithm="tree", protocol="Simple") for s in (16 * MiB, GiB)
    )
    fill_small = (
        small.costs[0].latency_s
        - price(topo, "all_reduce", 8, algorithm="tree", protocol="Simple").costs[0].latency_s
    )
    fill_large = (
        large.costs[0].latency_s
        - price(topo, "all_reduce", 8, algorithm="tree", protocol="Simple").costs[0].latency_s
    )
    assert 0 < fill_small == pytest.approx(fill_large, rel=1e-6)
    assert fill_large < 0.2 * large.closed_form_s


def test_rings_have_no_separate_fill() -> None:
    topo = load_cluster("dgx-a100", gpus=16)
    latencies = {
        price(topo, "all_reduce", s, algorithm="ring", protocol="LL128").costs[0].latency_s
        for s in (MiB, GiB)
    }
    assert len(latencies) == 1


def test_the_platform_environment_restricts_protocols_unless_the_user_sets_them() -> None:
    p4de = load_cluster("p4de.24xlarge", gpus=16)  # aws-ofi-nccl forces NCCL_PROTO=simple on EFA gen1
    assert {price(p4de, "all_reduce", s).protocol for s in (8, MiB, GiB)} == {"Simple"}
    with pytest.raises(TrainsimError, match="protocol LL cannot run"):
        price(p4de, "all_reduce", 8, protocol="LL")
    mine = NcclOptions.from_env({"NCCL_PROTO": "LL,Simple"})
    assert price(p4de, "all_reduce", 8, options=mine).protocol == "LL"


def test_nccl_size_switches_are_checked() -> None:
    assert NcclOptions.from_env({"NCCL_BUFFSIZE": "8388608"}).buffsize == 8 * MiB
    with pytest.raises(TrainsimError, match="NCCL_NVLS_CHUNKSIZE='1k' is not allowed"):
        NcclOptions.from_env({"NCCL_NVLS_CHUNKSIZE": "1k"})
    platform = NcclOptions.from_env({"NCCL_BUFFSIZE": "8388608", "NCCL_PROTO": "simple"})
    merged = NcclOptions.from_env({"NCCL_BUFFSIZE": "4194304"}).over(platform)
    assert (merged.buffsize, merged.protocols) == (4 * MiB, frozenset({"Simple"}))


def test_ll_trees_forward_line_by_line_without_a_fill() -> None:
    """LL passes each 16-byte line on as its flag arrives: a tree's LL latency is the same at 8 B and
    at 256 KiB (no chunk stored per hop), while LL128's grows with its chunk."""
    topo = load_cluster("dgx-a100", gpus=16)

    def latency(size: int, proto: str) -> float:
        return price(topo, "all_reduce", size, algorithm="tree", protocol=proto).costs[0].latency_s

    assert latency(256 * KiB, "LL") == pytest.approx(latency(8, "LL"), rel=1e-12)
    assert latency(4 * MiB, "LL128") > latency(8, "LL128")


def test_a_two_node_all_reduce_never_gets_faster_with_size() -> None:
    """The size NCCL's model switches protocols at must not make a larger message finish sooner."""
    topo = load_cluster("dgx-a100", gpus=16)
    times = [price(topo, "all_reduce", 1024 << (2 * i)).closed_form_s for i in range(11)]
    assert times == sorted(times)


def test_nvls_tree_fill_counts_the_switch_reduce_and_broadcast_legs() -> None:
    """NCCL's NVLS tree reduces through the switch before the first network send and broadcasts
    through it after the last receive (all_reduce.h: "Reduce, send to network", "Recv from network,
    broadcast"): two NVLink stages and, on two nodes, two network stages (up and down the tree).

    By hand, 16 ranks on 2 nodes of 8, 32 NICs, 128 MiB: chunk 128 KiB; 16 NVLS channels x 8 heads
    = 128 concurrent operations, 4 per NIC. NVLink stage: 128 KiB x 128 x 2.5 ps/B; network stage:
    128 KiB x 4 x 80 ps/B. fill = 2 t_nvl + 2 t_net - max(t_nvl, t_net)."""
    info = _info(arch="hopper", nics=32)
    nvl_pb, net_pb = 2.5e-12, 80e-12
    phase = Phase("nvls_tree", (), Hops("nvls_tree", 1.0, 2.0), stage_s_per_byte=(nvl_pb, net_pb))
    chunk = 128 * KiB
    t_nvl, t_net = chunk * 128 * nvl_pb, chunk * 4 * net_pb
    expected = 2 * t_nvl + 2 * t_net - max(t_nvl, t_net)
    assert fill_s(phase, "Simple", 128 * MiB, info, 1.0) == pytest.approx(expected, rel=1e-12)


def test_an_nvls_tree_all_reduce_never_gets_faster_with_size() -> None:
    """Two p5 nodes: the NVLS-tree chunk doubles at NCCL's thresholds (and with it the fill), and
    NCCL's pick changes with size; neither may make a larger message finish sooner."""
    topo = load_cluster("p5.48xlarge", gpus=16, nodes=2)
    for algorithm in (None, "nvls_tree"):
        times = [
            price(topo, "all_reduce", 1024 << (2 * i), algorithm=algorithm).closed_form_s for i in range(13)
        ]
        assert times == sorted(times)
