"""NCCL's tuner ranks with the network plugin's reported latency; trainsim prices at the fabric's.

aws-ofi-nccl reports 75 us for its network device on p4d, p4de and p5 (src/platform-aws.cpp,
platform_data_map ``.latency``; ``OFI_NCCL_NET_LATENCY`` overrides it). NCCL stores it as
``graph->latencyInter`` (src/graph/search.cc) and adds it to every node-crossing hop's latency when
it predicts an (algorithm, protocol) pair, twice for Simple (src/graph/tuning.cc). The hand counts
below: on 2 nodes a ring all-reduce crosses nodes 2(n-1) = 2 times, a tree or NVLS tree 2 x depth
= 2 times; on p5 the fabric's own NIC-to-NIC latency is 2 x 11 us (the preset's ``nic_latency``).
"""

from __future__ import annotations

import functools

import pytest

from simcore.collectives import build_plan, price
from simcore.collectives.cost import plan_cost, tuner_time_s
from simcore.collectives.options import NcclOptions
from simcore.errors import TrainsimError
from simcore.topology import Topology
from topologies import load_cluster

US = 1e-6
MiB = 1 << 20
PLUGIN_US = 75.0  # aws-ofi-nccl platform_data_map, p4d / p4de / p5
P5_FABRIC_US = 2 * 11.0  # p5 preset: nic_latency 11 us on each side
RING_PLATEAU = 1.4  # NCCL: multi-node Simple ring all-reduce latency, Ampere and later
NET_HOPS_2_NODES = 2  # ring 2(n-1), trees 2 x depth(2 nodes) = 2


@functools.cache
def _p5(nodes: int = 2) -> Topology:
    return load_cluster("p5.48xlarge", nodes=nodes)


def _tuner_minus_priced_us(algorithm: str, protocol: str, size: float) -> float:
    topology = _p5()
    priced = price(topology, "all_reduce", size, algorithm=algorithm, protocol=protocol)
    plan = build_plan(topology, "all_reduce", size, algorithm=algorithm, protocol=protocol)
    assert plan_cost(priced.costs)[0] == pytest.approx(priced.closed_form_s, rel=1e-12)
    return (tuner_time_s(plan, priced.costs, protocol, size, priced.info) - priced.closed_form_s) / US


def _hand_delta_us(algorithm: str, protocol: str) -> float:
    per_hop = (PLUGIN_US - P5_FABRIC_US) * (2 if protocol == "Simple" else 1)
    plateau = RING_PLATEAU if (algorithm, protocol) == ("ring", "Simple") else 1.0
    return NET_HOPS_2_NODES * per_hop * plateau


@pytest.mark.parametrize(
    ("algorithm", "protocol"),
    [
        ("ring", "LL"),
        ("ring", "LL128"),
        ("ring", "Simple"),
        ("tree", "LL128"),
        ("tree", "Simple"),
        ("nvls_tree", "Simple"),
    ],
)
def test_tuner_sees_every_network_hop_at_the_plugin_latency(algorithm: str, protocol: str) -> None:
    """LL/LL128: 2 hops x (75 - 22) us = 106 us; Simple twice that; a Simple ring x 1.4 (plateau)."""
    got = _tuner_minus_priced_us(algorithm, protocol, 16 * MiB)
    assert got == pytest.approx(_hand_delta_us(algorithm, protocol), rel=1e-9)


def test_the_reported_latency_steers_the_choice_and_never_the_price() -> None:
    """p5, 2 nodes, 64 MiB: the cheapest priced pair is NVLS tree / Simple, but it pays 4 x 53 us in
    NCCL's ranking against 2 x 53 us for a ring / LL128; NCCL runs the ring, priced as the ring."""
    topology, size = _p5(), 64 * MiB
    pairs = [
        (a, p)
        for a, protos in (
            ("ring", ("LL", "LL128", "Simple")),
            ("tree", ("LL", "LL128", "Simple")),
            ("nvls_tree", ("Simple",)),
        )
        for p in protos
    ]
    priced = {
        pair: price(topology, "all_reduce", size, algorithm=pair[0], protocol=pair[1]).closed_form_s
        for pair in pairs
    }
    ranked = {pair: t + _hand_delta_us(*pair) * US for pair, t in priced.items()}
    chosen = price(topology, "all_reduce", size)
    assert (chosen.algorithm, chosen.protocol) == min(ranked, key=ranked.__getitem__) == ("ring", "LL128")
    assert min(priced, key=priced.__getitem__) == ("nvls_tree", "Simple")
    assert chosen.closed_form_s == priced[("ring", "LL128")]


def test_a_plugin_latency_equal_to_the_fabric_ranks_by_price() -> None:
    """With OFI_NCCL_NET_LATENCY at the fabric's own 22 us, ranking and price coincide: NVLS tree."""
    options = NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": str(P5_FABRIC_US)})
    chosen = price(_p5(), "all_reduce", 64 * MiB, options=options)
    assert (chosen.algorithm, chosen.protocol) == ("nvls_tree", "Simple")


def test_pinned_prices_do_not_depend_on_the_reported_latency() -> None:
    topology, size = _p5(), 16 * MiB
    prices = {
        latency: price(
            topology,
            "all_reduce",
            size,
            algorithm="tree",
            protocol="Simple",
            options=NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": latency}),
        ).closed_form_s
        for latency in ("0", "75", "500")
    }
    assert len(set(prices.values())) == 1


def test_efa_presets_carry_the_plugin_latency_and_one_node_ignores_it() -> None:
    for name in ("p4de.24xlarge", "p5.48xlarge"):
        assert price(
            load_cluster(name, nodes=2), "all_reduce", MiB
        ).info.tuner_net_latency_s == pytest.approx(75 * US)
        assert price(load_cluster(name, nodes=1), "all_reduce", MiB).info.tuner_net_latency_s is None
    assert price(load_cluster("dgx-a100", gpus=16), "all_reduce", MiB).info.tuner_net_latency_s is None


def test_plugin_latency_from_the_environment() -> None:
    assert NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "75"}).plugin_net_latency_us == 75.0
    assert NcclOptions.from_env({}).plugin_net_latency_us is None
    platform = NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "75"})
    assert NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": "0"}).over(platform).plugin_net_latency_us == 0.0
    assert NcclOptions().over(platform).plugin_net_latency_us == 75.0
    for bad in ("-1", "lots", "nan", "20000"):
        with pytest.raises(TrainsimError, match=r"OFI_NCCL_NET_LATENCY=.* is not allowed; give microseconds"):
            NcclOptions.from_env({"OFI_NCCL_NET_LATENCY": bad})
