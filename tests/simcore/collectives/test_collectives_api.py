"""The collectives API on the shipped presets: choices, errors, ring order, calibration, caching."""

from __future__ import annotations

from typing import cast

import pytest

from simcore.collectives import (
    ALGORITHMS,
    STEP_OVERHEAD_S,
    AlgorithmUnavailable,
    CollectiveResult,
    build_plan,
    choose_algorithm,
    closed_form_time,
    collective_time,
    start_collective,
)
from simcore.collectives.plan import PlanContext
from simcore.collectives.ring import ring_moves
from simcore.collectives.selection import CANDIDATES
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


def test_ring_all_reduce_on_one_dgx_is_the_textbook_formula(dgx: Topology) -> None:
    result = collective_time(dgx, "all_reduce", GiB, algorithm="ring")
    link = dgx.link("h0/gpu0", "h0/nvswitch")
    alpha = 2 * link.latency_s + STEP_OVERHEAD_S
    expected = 2 * 7 / 8 * GiB / link.bandwidth_Bps + 14 * alpha
    assert result.time_s == pytest.approx(expected, rel=1e-9)
    assert result.closed_form_s == pytest.approx(expected, rel=1e-9)
    assert result.bottleneck_link == "h0/gpu0->h0/nvswitch (nvswitch, 300.0 GB/s)"
    assert result.group == tuple(range(8))


def test_results_are_cached_and_plain_records(dgx: Topology) -> None:
    first = collective_time(dgx, "all_gather", 1 << 20)
    assert collective_time(dgx, "all_gather", 1 << 20) is first
    assert isinstance(first, CollectiveResult) and first.events > 0


def test_single_node_choice_is_ring_or_nvls_as_nccl() -> None:
    assert {
        choose_algorithm(load_cluster("dgx-a100", gpus=8), "all_reduce", s) for s in (8, 1 << 20, GiB)
    } == {"ring"}
    assert choose_algorithm(load_cluster("hgx-h100", gpus=8), "all_reduce", GiB) == "nvls"


def test_choice_is_the_fastest_candidate_across_nodes(dgx4: Topology) -> None:
    for size in (8, 1 << 16, 1 << 24, GiB):
        chosen = choose_algorithm(dgx4, "all_reduce", size)
        times = {}
        for name in CANDIDATES["all_reduce"]:
            try:
                times[name] = closed_form_time(dgx4, "all_reduce", name, size)
            except AlgorithmUnavailable:
                continue
        assert times[chosen] == min(times.values())
    assert choose_algorithm(dgx4, "all_reduce", 8) != "ring"  # latency-bound: fewer steps win


def test_unavailable_and_unknown_algorithms_name_what_is_allowed(dgx: Topology, dgx4: Topology) -> None:
    with pytest.raises(AlgorithmUnavailable, match="nvls"):
        collective_time(dgx, "all_reduce", 1024, algorithm="nvls")
    with pytest.raises(AlgorithmUnavailable, match="two hosts"):
        collective_time(dgx, "all_reduce", 1024, algorithm="hierarchical")
    with pytest.raises(TrainsimError, match="allowed: ring"):
        collective_time(dgx, "all_gather", 1024, algorithm="tree")
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
    assert collective_time(dgx4, "all_reduce", 1024, algorithm="sharp").algorithm == "sharp"


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


class _Profile:
    def __init__(self, fits: dict[tuple[str, int, str], tuple[float, float]]) -> None:
        self.fits = fits

    def collective_alpha_beta(self, op: str, ranks: int, scope: str) -> tuple[float, float] | None:
        return self.fits.get((op, ranks, scope))


def test_calibrated_alpha_beta_replaces_the_simulation_where_measured(dgx: Topology) -> None:
    profile = _Profile({("all_reduce", 8, "intra_node"): (20e-6, 200e9)})
    result = collective_time(dgx, "all_reduce", GiB, calibration=profile)  # type: ignore[arg-type]
    assert result.algorithm == "calibrated"
    assert result.time_s == pytest.approx(20e-6 + 2 * 7 / 8 * GiB / 200e9)
    other = collective_time(dgx, "all_gather", GiB, calibration=profile)  # type: ignore[arg-type]
    assert other.algorithm == "ring"


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
    assert "h0" in collective_time(dgx4, "ps_push", GiB, workers, servers=[0]).bottleneck_link


def test_aggregate_mode_uses_far_fewer_events_than_per_step(dgx4: Topology) -> None:
    aggregate = collective_time(dgx4, "all_reduce", 1 << 24, algorithm="ring")
    per_step = collective_time(dgx4, "all_reduce", 1 << 24, algorithm="ring", mode="per-step")
    assert aggregate.time_s == pytest.approx(per_step.time_s, rel=0.01)
    assert aggregate.events * 10 < per_step.events
    plan = build_plan(dgx4, "all_reduce", 1 << 24, algorithm="ring")
    assert plan.transfer_count <= 2 * 32  # one flow per intra-node hop and per NIC stripe


@pytest.mark.parametrize("op", sorted(ALGORITHMS))
def test_every_op_runs_on_two_nodes(op: str, dgx4: Topology) -> None:
    result = collective_time(dgx4, op, 1 << 22)
    assert result.time_s == pytest.approx(result.closed_form_s, rel=0.01) and result.time_s > 0


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
