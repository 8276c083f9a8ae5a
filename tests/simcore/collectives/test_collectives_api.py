"""The collectives API on the shipped presets: choices, errors, ring order, calibration, caching."""

from __future__ import annotations

from typing import cast

import pytest

from simcore.calibration.profile import CalibrationProfile, ClusterDescription, CollectiveFit, ProtocolFit
from simcore.collectives import (
    ALGORITHMS,
    AUTO,
    AlgorithmUnavailable,
    CollectiveResult,
    LinkRef,
    NcclOptions,
    build_plan,
    choose_algorithm,
    closed_form_time,
    collective_time,
    concurrent_collective_time,
    describe_link,
    price,
    start_collective,
)
from simcore.collectives.cost import tuner_time_s
from simcore.collectives.plan import PlanContext
from simcore.collectives.ring import ring_moves
from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.net.network import Network
from simcore.topology import Topology
from topologies import load_cluster

GiB = 1 << 30


@pytest.fixture(scope="module")
def dgx() -> Topology:
    return load_cluster("dgx-a100", gpus=8)


@pytest.fixture(scope="module")
def dgx4() -> Topology:
    return load_cluster("dgx-a100", gpus=32)


def test_ring_all_reduce_on_one_dgx_follows_nccls_model(dgx: Topology) -> None:
    """Ring/Simple on 8 A100s: NCCL's latency (8.4 us + 14 NVLink steps of 3.4 us) plus the larger of
    the NVLink time at its achievable 80% and the A100's ~230 GB/s kernel limit."""
    result = collective_time(dgx, "all_reduce", GiB, algorithm="ring", protocol="Simple")
    latency = (8.4 + 14 * 3.4) * 1e-6
    link = 2 * 7 / 8 * GiB / (300e9 * 0.8)
    engine = 2 * 7 / 8 * GiB / 230e9
    assert result.closed_form_s == pytest.approx(latency + max(link, engine), rel=1e-9)
    assert result.time_s == pytest.approx(result.closed_form_s, rel=1e-9)
    assert result.bottleneck == LinkRef("h0/gpu0", "h0/nvswitch", "nvswitch", 300e9, 240e9)
    assert describe_link(result.bottleneck) == "h0/gpu0->h0/nvswitch (nvswitch, 240.0 of 300.0 GB/s)"
    assert result.group == tuple(range(8)) and result.protocol == "Simple"


def test_results_are_cached_and_plain_records(dgx: Topology) -> None:
    first = collective_time(dgx, "all_gather", 1 << 20)
    assert collective_time(dgx, "all_gather", 1 << 20) is first
    assert isinstance(first, CollectiveResult) and first.events > 0


def test_single_node_choice_is_ring_or_nvls_as_nccl() -> None:
    a100 = load_cluster("dgx-a100", gpus=8)
    assert {choose_algorithm(a100, "all_reduce", s) for s in (8, 1 << 20, GiB)} == {"ring"}
    h100 = load_cluster("hgx-h100", gpus=8)
    assert choose_algorithm(h100, "all_reduce", 8) == "ring"  # NVLS's 25 us latency does not pay
    assert choose_algorithm(h100, "all_reduce", GiB) == "nvls"
    four = load_cluster("hgx-h100", gpus=4)
    assert {choose_algorithm(four, "all_reduce", s) for s in (8, 1 << 20, GiB, 16 * GiB)} == {"ring"}
    assert collective_time(a100, "all_reduce", 8).protocol == "LL"
    assert collective_time(a100, "all_reduce", GiB).protocol == "Simple"


def test_choice_is_the_candidate_nccls_model_ranks_fastest_across_nodes(dgx4: Topology) -> None:
    """NCCL runs the pair its own model (no pipeline fill, trees derated at medium sizes) ranks
    first, which need not be the cheapest price: at 16 MiB on 4 nodes the tree, not the ring."""
    for size in (8, 1 << 16, 1 << 24, GiB):
        chosen = choose_algorithm(dgx4, "all_reduce", size)
        ranked = {}
        for name in AUTO["all_reduce"]:
            if name == "collnet_direct":
                continue  # off unless enabled
            for proto in ("LL", "LL128", "Simple"):
                try:
                    priced = price(dgx4, "all_reduce", size, algorithm=name, protocol=proto)
                except AlgorithmUnavailable:
                    continue
                plan = build_plan(dgx4, "all_reduce", size, algorithm=name, protocol=proto)
                ranked[name, proto] = tuner_time_s(plan, priced.costs, proto, size, priced.info)
        assert chosen == min(ranked, key=ranked.__getitem__)[0]
    assert choose_algorithm(dgx4, "all_reduce", 8) != "ring"  # latency-bound: fewer steps win
    prices = {name: closed_form_time(dgx4, "all_reduce", name, 1 << 24) for name in ("ring", "tree")}
    assert choose_algorithm(dgx4, "all_reduce", 1 << 24) == "tree" and prices["ring"] < prices["tree"]


def test_nccl_switches_restrict_the_choice(dgx: Topology, dgx4: Topology) -> None:
    only_simple = NcclOptions.from_env({"NCCL_PROTO": "Simple"})
    assert collective_time(dgx, "all_reduce", 8, options=only_simple).protocol == "Simple"
    no_ll = NcclOptions.from_env({"NCCL_PROTO": "^LL"})
    assert collective_time(dgx, "all_reduce", 8, options=no_ll).protocol == "LL128"
    ring = NcclOptions.from_env({"NCCL_ALGO": "Ring"})
    assert collective_time(dgx4, "all_reduce", 8, options=ring).algorithm == "ring"
    assert collective_time(dgx4, "all_reduce", 8, protocol="ll128").protocol == "LL128"
    # SHARP is off in stock NCCL: the fabric can reduce, but CollNet runs only when enabled
    assert not price(dgx4, "all_reduce", GiB).info.collnet
    on = NcclOptions.from_env({"NCCL_COLLNET_ENABLE": "1"})
    assert price(dgx4, "all_reduce", GiB, options=on).info.collnet
    for env, what in (({"NCCL_ALGO": "warp"}, "NCCL_ALGO"), ({"NCCL_PROTO": "LL256"}, "NCCL_PROTO"),
                      ({"NCCL_COLLNET_ENABLE": "yes"}, "NCCL_COLLNET_ENABLE")):  # fmt: skip
        with pytest.raises(TrainsimError, match=what):
            NcclOptions.from_env(env)


def test_unavailable_and_unknown_algorithms_name_what_is_allowed(dgx: Topology, dgx4: Topology) -> None:
    with pytest.raises(AlgorithmUnavailable, match="nvls"):
        collective_time(dgx, "all_reduce", 1024, algorithm="nvls")
    with pytest.raises(AlgorithmUnavailable, match="two hosts"):
        collective_time(dgx, "all_reduce", 1024, algorithm="hierarchical")
    with pytest.raises(TrainsimError, match="allowed: ring"):
        collective_time(dgx, "all_gather", 1024, algorithm="tree")
    with pytest.raises(TrainsimError, match="protocol"):
        collective_time(dgx, "all_reduce", 1024, protocol="LL256")
    with pytest.raises(AlgorithmUnavailable, match="protocol LL cannot run nvls"):
        collective_time(load_cluster("hgx-h100", gpus=8), "all_reduce", 1024, algorithm="nvls", protocol="LL")
    with pytest.raises(TrainsimError, match="unknown collective"):
        collective_time(dgx, "alltoall", 1024)
    with pytest.raises(TrainsimError, match=">= 0"):
        collective_time(dgx, "all_reduce", -1)
    with pytest.raises(TrainsimError, match=r"ranks 0\.\.7"):
        collective_time(dgx, "all_reduce", 1024, [0, 8])
    with pytest.raises(TrainsimError, match="twice"):
        collective_time(dgx, "all_reduce", 1024, [1, 1])
    with pytest.raises(TrainsimError, match="mode"):
        collective_time(dgx, "all_reduce", 1024, mode="fast")
    with pytest.raises(TrainsimError, match="root"):
        collective_time(dgx, "broadcast", 1024, [0, 1], root=5)
    assert collective_time(dgx4, "all_reduce", 1024, algorithm="sharp").algorithm == "collnet_direct"


def test_multi_node_rings_cross_each_node_boundary_once_striped_over_every_nic(dgx4: Topology) -> None:
    network = Network(Simulation().env, dgx4)
    moves = ring_moves(PlanContext(dgx4, network.route, tuple(range(32))), 1.0)
    host = {d: dgx4.node(d)["host"] for d in dgx4.ranks}
    crossings = [(s, d, via, size) for s, d, via, size in moves if host[s] != host[d]]
    assert len({(s, d) for s, d, _, _ in crossings}) == 4  # one hop into each node
    assert len([m for m in moves if host[m[0]] == host[m[1]]]) == 28
    nics = {n for _, _, via, _ in crossings for n in via if dgx4.node(n)["kind"] == "nic"}
    assert len(nics) == 32  # every NIC of every node carries a stripe
    assert sum(size for *_, size in crossings) == pytest.approx(4.0)
    plan = build_plan(dgx4, "all_reduce", GiB, algorithm="ring")
    assert plan.phases[0].link_loads()[("h0/nic0", "rail0")] == pytest.approx(2 * 31 / 32 * GiB / 8)


def test_custom_group_order_is_respected(dgx: Topology) -> None:
    plan = build_plan(dgx, "all_reduce", 1 << 20, [3, 1, 2, 0], algorithm="ring")
    hops = [(t.src, t.dst) for t in plan.phases[0].transfers]
    assert hops == [
        ("h0/gpu3", "h0/gpu1"),
        ("h0/gpu1", "h0/gpu2"),
        ("h0/gpu2", "h0/gpu0"),
        ("h0/gpu0", "h0/gpu3"),
    ]


def _profile(fits: dict[tuple[str, int, str], CollectiveFit]) -> CalibrationProfile:
    return CalibrationProfile(ClusterDescription("nccl", "gpu", "", 8, 8, 1), fits)


def test_calibrated_alpha_beta_replaces_the_simulation_where_measured(dgx: Topology) -> None:
    profile = _profile(
        {("all_reduce", 8, "intra_node"): CollectiveFit("all_reduce", 8, "intra_node", 20e-6, 200e9)}
    )
    result = collective_time(dgx, "all_reduce", GiB, calibration=profile)
    assert result.algorithm == "calibrated"
    assert result.time_s == pytest.approx(20e-6 + 2 * 7 / 8 * GiB / 200e9)
    other = collective_time(dgx, "all_gather", GiB, calibration=profile)
    assert other.algorithm == "ring"


def test_calibrated_protocol_lines_answer_with_the_fastest(dgx: Topology) -> None:
    lines = {"LL": ProtocolFit(10e-6, 50e9), "Simple": ProtocolFit(40e-6, 220e9)}
    fit = CollectiveFit("all_reduce", 8, "intra_node", 40e-6, 220e9, protocols=lines, undetermined=("LL128",))
    profile = _profile({("all_reduce", 8, "intra_node"): fit})
    small = collective_time(dgx, "all_reduce", 1024, calibration=profile)
    large = collective_time(dgx, "all_reduce", GiB, calibration=profile)
    assert (small.protocol, large.protocol) == ("LL", "Simple")
    assert small.time_s == pytest.approx(10e-6 + 2 * 7 / 8 * 1024 / 50e9)


def test_start_collective_reports_the_contended_time(dgx: Topology) -> None:
    sim = Simulation(0)
    network = Network(sim.env, dgx)
    alone = collective_time(dgx, "all_reduce", GiB, [0, 1, 2, 3], algorithm="ring")
    first = start_collective(sim, network, "all_reduce", GiB, [0, 1, 2, 3], algorithm="ring")
    second = start_collective(sim, network, "all_reduce", GiB, [4, 5, 6, 7], algorithm="ring")
    sim.run()
    times = [cast(CollectiveResult, p.value).time_s for p in (first, second)]
    assert times == pytest.approx([alone.time_s, alone.time_s])


def test_parameter_server_incast_shrinks_with_more_server_shards(dgx4: Topology) -> None:
    workers = list(range(8, 32))
    one = collective_time(dgx4, "ps_push", GiB, workers, servers=[0]).time_s
    two = collective_time(dgx4, "ps_push", GiB, workers, servers=[0, 1]).time_s
    assert two < one
    link = collective_time(dgx4, "ps_push", GiB, workers, servers=[0]).bottleneck
    assert link is not None and "h0/" in link.src + link.dst


def test_aggregate_mode_uses_far_fewer_events_than_per_step(dgx4: Topology) -> None:
    aggregate = collective_time(dgx4, "all_reduce", 1 << 24, algorithm="ring")
    per_step = collective_time(dgx4, "all_reduce", 1 << 24, algorithm="ring", mode="per-step")
    assert aggregate.time_s == pytest.approx(per_step.time_s, rel=0.01)
    assert aggregate.protocol == per_step.protocol
    assert aggregate.events * 10 < per_step.events
    plan = build_plan(dgx4, "all_reduce", 1 << 24, algorithm="ring")
    assert plan.transfer_count <= 2 * 32  # one flow per intra-node hop and per NIC stripe


@pytest.mark.parametrize("op", sorted(ALGORITHMS))
def test_every_op_runs_on_two_nodes(op: str, dgx4: Topology) -> None:
    result = collective_time(dgx4, op, 1 << 22)
    assert result.time_s == pytest.approx(result.closed_form_s, rel=0.01) and result.time_s > 0
    assert result.protocol in ("LL", "LL128", "Simple")


def test_all_to_allv_is_limited_by_the_busiest_receiver(dgx4: Topology) -> None:
    even = collective_time(dgx4, "all_to_allv", 1 << 26).time_s
    assert even == pytest.approx(collective_time(dgx4, "all_to_all", 1 << 26).time_s)
    skewed = [[0.0 if i == j else (8.0 if j == 0 else 1.0) for j in range(32)] for i in range(32)]
    assert collective_time(dgx4, "all_to_allv", 1 << 26, splits=skewed).time_s > 2 * even
    with pytest.raises(TrainsimError, match="32x32"):
        collective_time(dgx4, "all_to_allv", 1 << 26, splits=[[1.0]])


def test_concurrent_groups_share_only_the_links_they_have_in_common() -> None:
    """HSDP's replicate groups, one per local rank: on AWS g5 they all cross the node's one NIC; on a
    rail-optimised DGX each has its own rail."""
    for preset, shared in (("g5.48xlarge", True), ("dgx-a100", False)):
        topology = load_cluster(preset, nodes=2)
        g = len(topology.ranks_on_host(0))
        groups = [(i, i + g) for i in range(g)]
        alone = collective_time(topology, "all_reduce", 1 << 26, groups[0]).time_s
        together = concurrent_collective_time(topology, "all_reduce", 1 << 26, groups).time_s
        assert (together > 4 * alone) if shared else together == pytest.approx(alone, rel=1e-9)


def test_gpus_without_peer_to_peer_stage_through_host_memory() -> None:
    """AWS g5: no GPU P2P, so NCCL's SHM transport copies through the CPU's memory, at 70% of the
    PCIe path's achievable rate, and pays the host round trip as latency."""
    g5 = load_cluster("g5.12xlarge")
    plan = build_plan(g5, "all_reduce", GiB, algorithm="ring", protocol="Simple")
    assert all(any(g5.node(v)["kind"] == "cpu" for _, v in t.route) for t in plan.phases[0].transfers)
    result = collective_time(g5, "all_reduce", GiB, algorithm="ring", protocol="Simple")
    busbw = 2 * 3 / 4 * GiB / result.time_s
    assert busbw == pytest.approx(31.5e9 * 0.762 * 0.7, rel=0.02)


def test_large_groups_are_priced_through_a_representative() -> None:
    """Beyond the representative's nodes the closed form comes from the first nodes' layout with
    the whole group's latency counts; laid out in full, the group gives the same time."""
    big = load_cluster("dgx-a100", nodes=12)
    priced = price(big, "all_reduce", 1 << 28, algorithm="ring")
    assert priced.plan is None
    full = collective_time(big, "all_reduce", 1 << 28, algorithm="ring", mode="per-step")
    assert full.time_s == pytest.approx(priced.closed_form_s, rel=0.01)


def test_per_step_mode_is_refused_for_huge_groups() -> None:
    big = load_cluster("dgx-a100", gpus=256)
    with pytest.raises(TrainsimError, match="per-step mode would start"):
        collective_time(big, "all_reduce", GiB, algorithm="ring", mode="per-step")


def test_planned_routes_and_latencies_are_the_networks_own(dgx4: Topology) -> None:
    """A plan's transfers follow the router's paths (hop by hop) and carry the network's latency."""
    network = Network(Simulation().env, dgx4)
    plan = build_plan(dgx4, "all_reduce", GiB, algorithm="tree")
    for transfer in plan.phases[0].transfers:
        assert transfer.latency_s == network.route_latency(transfer.route)  # bit for bit
        assert transfer.route[0][0] == transfer.src and transfer.route[-1][1] == transfer.dst
        assert all(a[1] == b[0] for a, b in zip(transfer.route, transfer.route[1:], strict=False))


def test_collector_pause_is_restored_even_on_errors() -> None:
    import gc

    from simcore.collectives.gc_pause import gc_paused

    was_enabled = gc.isenabled()
    try:
        gc.enable()
        with pytest.raises(RuntimeError), gc_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")
        assert gc.isenabled()
        gc.disable()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        (gc.enable if was_enabled else gc.disable)()
