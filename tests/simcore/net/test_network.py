"""Flows over shared links: what theory says a max-min fair fluid network must do."""

from __future__ import annotations

import networkx as nx
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.net.network import Flow, Network
from simcore.topology import Topology
from tests.simcore.net.test_network_topologies import GBps, duplex, small_cluster


def star(k: int, *, thin_Bps: float = 10 * GBps, latency_s: float = 0.0) -> Topology:
    """k senders with fat private links into one switch, one thin link from the switch to the sink."""
    g = nx.DiGraph()
    g.add_node("sw", kind="switch")
    g.add_node("sink", kind="gpu")
    duplex(g, "sw", "sink", thin_Bps, latency_s, "ib")
    for i in range(k):
        g.add_node(f"s{i}", kind="gpu")
        duplex(g, f"s{i}", "sw", 100 * thin_Bps, 0.0, "nvlink")
    return Topology("star", g, [f"s{i}" for i in range(k)] + ["sink"])


def run_flows(topo: Topology, flows: list[tuple[str, str, float, float]]) -> Network:
    """Start (src, dst, bytes, start_s) flows and run to the end; completed flows are kept."""
    env = simpy.Environment()
    net = Network(env, topo)
    net.keep_completed = True

    def starter(index: int, src: str, dst: str, size: float, at: float):
        yield env.timeout(at)
        net.transfer(src, dst, size, tag=str(index))

    for index, spec in enumerate(flows):
        env.process(starter(index, *spec))
    env.run()
    return net


def by_id(net: Network) -> list[Flow]:
    """Completed flows in the order they were listed (their tag is their list index)."""
    return sorted(net.completed, key=lambda f: int(f.tag))


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 40), size=st.floats(1.0, 1e10))
def test_k_equal_flows_on_one_bottleneck_each_get_one_kth(k: int, size: float) -> None:
    topo = star(k)
    net = run_flows(topo, [(f"s{i}", "sink", size, 0.0) for i in range(k)])
    flows = by_id(net)
    assert [f.rate_Bps for f in flows] == [10 * GBps / k] * k
    assert all(f.end_s == pytest.approx(size * k / (10 * GBps), rel=1e-12) for f in flows)
    assert net.recomputations == 2  # one when they all start, one when they all finish


def test_rate_changes_when_a_flow_joins_and_when_one_leaves() -> None:
    """Processor sharing: A alone at 10 GB/s for 1 s, then A and B at 5 GB/s each."""
    net = run_flows(star(2), [("s0", "sink", 20e9, 0.0), ("s1", "sink", 5e9, 1.0)])
    a, b = by_id(net)
    assert b.end_s == pytest.approx(2.0)  # 5 GB at 5 GB/s from t=1
    assert a.end_s == pytest.approx(2.5)  # 10 GB by t=1, 5 GB by t=2, last 5 GB alone at 10 GB/s
    assert net.recomputations == 4  # start A, start B, B ends, A ends


def test_latency_is_paid_once_after_the_last_byte() -> None:
    net = run_flows(star(1, latency_s=2e-6), [("s0", "sink", 1e9, 0.0)])
    (flow,) = net.completed
    assert flow.sent_s == pytest.approx(0.1)
    assert flow.end_s == pytest.approx(0.1 + 2e-6)


def test_empty_and_local_transfers_arrive_without_using_links() -> None:
    env = simpy.Environment()
    net = Network(env, star(1))
    done = [net.transfer("s0", "sink", 0), net.transfer("s0", "s0", 1e9)]
    env.run()
    assert all(d.processed for d in done)
    assert len(net.stats) == 0


def _random_flows(topo: Topology, draw: st.DrawFn, count: int) -> list[tuple[str, str, float, float]]:
    ranks = st.sampled_from(topo.ranks)
    return [
        (
            draw(ranks),
            draw(ranks),
            draw(st.sampled_from([1e6, 3e7, 1e8, 2.5e8])),
            draw(st.sampled_from([0.0, 0.0, 1e-3, 5e-3])),
        )
        for _ in range(count)
    ]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Topology, list[tuple[str, str, float, float]]]:
    topo = small_cluster(
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 2)),
        draw(st.integers(1, 2)),
        draw(st.integers(0, 2)),
        nic_Bps=draw(st.sampled_from([5, 10, 25])) * GBps,
        uplink_Bps=draw(st.sampled_from([5, 20])) * GBps,
    )
    return topo, _random_flows(topo, draw, draw(st.integers(1, 12)))


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_bytes_are_conserved_on_every_link(scenario: tuple[Topology, list]) -> None:
    topo, flows = scenario
    net = run_flows(topo, flows)
    expected: dict[tuple[str, str], float] = {}
    for f in net.completed:
        for e in f.route:
            expected[e] = expected.get(e, 0.0) + f.size_bytes
    stats = net.stats
    assert set(stats) == set(expected)
    for e, total in expected.items():
        assert stats[e].bytes == pytest.approx(total, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_utilisation_and_busy_time_are_bounded(scenario: tuple[Topology, list]) -> None:
    topo, flows = scenario
    net = run_flows(topo, flows)
    elapsed = float(net.env.now)
    for e, util in net.utilisation().items():
        assert 0.0 <= util <= 1.0 + 1e-9, e
    for e, s in net.stats.items():
        assert 0.0 < s.busy_s <= elapsed * (1 + 1e-12)
        assert s.bytes <= topo.graph.edges[e]["bandwidth_Bps"] * s.busy_s * (1 + 1e-9)
        assert 1 <= s.max_flows <= s.flows <= len(flows)


@settings(max_examples=30, deadline=None)
@given(scenarios(), st.sampled_from([1.5, 2.0, 10.0]))
def test_more_bandwidth_everywhere_is_never_slower(scenario: tuple[Topology, list], factor: float) -> None:
    """Scaling every link by c divides every transmission time by c (latency unchanged)."""
    topo, flows = scenario
    base = by_id(run_flows(topo, flows))
    faster = topo.graph.copy()
    for _, _, attrs in faster.edges(data=True):
        attrs["bandwidth_Bps"] *= factor
    quick = by_id(run_flows(Topology(topo.name, faster, topo.ranks), flows))
    for slow, fast in zip(base, quick, strict=True):
        assert fast.end_s <= slow.end_s * (1 + 1e-9)
        if all(at == 0.0 for *_, at in flows):
            assert fast.sent_s == pytest.approx(slow.sent_s / factor, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(scenarios(), st.data())
def test_fewer_bytes_is_never_slower_for_that_flow(
    scenario: tuple[Topology, list], data: st.DataObject
) -> None:
    topo, flows = scenario
    i = data.draw(st.integers(0, len(flows) - 1))
    smaller = list(flows)
    src, dst, size, at = flows[i]
    smaller[i] = (src, dst, size / 2, at)
    before, after = by_id(run_flows(topo, flows)), by_id(run_flows(topo, smaller))
    assert after[i].end_s <= before[i].end_s


@settings(max_examples=20, deadline=None)
@given(scenarios())
def test_same_inputs_give_the_same_times_bit_for_bit(scenario: tuple[Topology, list]) -> None:
    topo, flows = scenario
    first = [(f.id, f.end_s, f.rate_Bps) for f in by_id(run_flows(topo, flows))]
    second = [(f.id, f.end_s, f.rate_Bps) for f in by_id(run_flows(small_copy(topo), flows))]
    assert first == second


def small_copy(topo: Topology) -> Topology:
    """The same cluster as a new object (no shared router cache)."""
    return Topology(topo.name, topo.graph.copy(), list(topo.ranks), dict(topo.metadata))


@settings(max_examples=30, deadline=None)
@given(scenarios())
def test_rates_are_recomputed_only_when_flows_start_or_end(scenario: tuple[Topology, list]) -> None:
    """At most one recomputation per distinct start instant plus one per finishing flow."""
    topo, flows = scenario
    net = run_flows(topo, flows)
    moving = [f for f in flows if f[0] != f[1]]
    starts = {at for *_, at in moving}
    assert net.recomputations <= len(starts) + len(moving)


def test_a_ring_of_many_flows_costs_a_handful_of_recomputations() -> None:
    topo = small_cluster(hosts=16, gpus=8, nics=8, leaves=4, spines=2)
    env = simpy.Environment()
    net = Network(env, topo)
    p = len(topo.ranks)
    for r in range(p):
        net.transfer(topo.ranks[r], topo.ranks[(r + 1) % p], 1e9)
    env.run()
    assert net.recomputations <= 4
    assert net.active_flows == 0


def test_link_statistics_name_the_bottleneck_by_class() -> None:
    topo = small_cluster(hosts=2, gpus=2, nics=1, leaves=1, spines=0, nic_Bps=5 * GBps)
    env = simpy.Environment()
    net = Network(env, topo)
    net.transfer("h0/gpu0", "h1/gpu0", 1e9)
    net.transfer("h0/gpu1", "h1/gpu1", 1e9)
    net.transfer("h0/gpu0", "h0/gpu1", 1e9)
    env.run()
    assert net.bottleneck_link() == ("h0/nic0", "leaf0")
    summary = {row.kind: row for row in net.link_summary()}
    assert set(summary) == {"ib", "nvswitch", "pcie"}
    ib = summary["ib"]
    assert ib.links == 2 and ib.max_flows == 2 and ib.bytes == pytest.approx(4e9)
    assert ib.busiest_link == "h0/nic0->leaf0" and ib.max_utilisation == pytest.approx(
        1.0, rel=1e-4
    )  # latency tail
    assert summary["nvswitch"].max_utilisation < 0.1


def test_stats_mid_flight_count_bytes_sent_so_far() -> None:
    env = simpy.Environment()
    net = Network(env, star(1))
    net.transfer("s0", "sink", 10e9)
    env.run(until=0.5)
    assert net.stats["sw", "sink"].bytes == pytest.approx(5e9)
    assert net.utilisation()["sw", "sink"] == pytest.approx(1.0)
    env.run()
    assert net.stats["sw", "sink"].bytes == 10e9


def test_utilisation_series_follows_rate_changes() -> None:
    net = run_flows(star(2), [("s0", "sink", 20e9, 0.0), ("s1", "sink", 5e9, 1.0)])
    series = net.link_utilisation_series([("sw", "sink"), ("s1", "sw")])
    assert series["sw", "sink"][0] == (0.0, 1.0) and series["sw", "sink"][-1] == (2.5, 0.0)
    assert series["s1", "sw"] == [(0.0, 0.0), (1.0, 0.005), (2.0, 0.0)]


def test_a_flow_due_to_finish_when_another_starts_still_finishes() -> None:
    """Regression: a start at the very instant of a completion (rounding leaves -1e-8 bytes)."""
    topo = small_cluster(2, 3, 1, 1, 1)
    flows = [
        ("h1/gpu2", "h0/gpu2", 1e8, 0.005),
        ("h1/gpu2", "h1/gpu1", 1e6, 0.0),
        ("h1/gpu2", "h0/gpu0", 2.5e8, 0.0),
        ("h0/gpu1", "h1/gpu2", 1e8, 0.0),
        ("h0/gpu2", "h1/gpu2", 1e6, 0.0),
        ("h1/gpu1", "h0/gpu0", 2.5e8, 0.001),
        ("h1/gpu2", "h0/gpu1", 1e6, 0.001),
        ("h1/gpu2", "h1/gpu0", 3e7, 0.0),
        ("h0/gpu0", "h0/gpu0", 3e7, 0.0),
        ("h0/gpu0", "h0/gpu2", 1e8, 0.0),
    ]
    net = run_flows(topo, flows)
    assert len(net.completed) == len(flows) and net.active_flows == 0


def _staggered_run(
    specs: list[tuple[int, int, float, float, float]], resume: bool
) -> list[tuple[float, float]]:
    """(src rank, dst rank, bytes, start, weight) flows on a 4-host cluster; (sent, arrived) per flow."""
    from simcore.net import fairshare

    saved = fairshare.INCREMENTAL_MIN_ENTRIES
    fairshare.INCREMENTAL_MIN_ENTRIES = 0 if resume else 2**62
    try:
        topo = small_cluster(hosts=4, gpus=4, nics=2, leaves=2, spines=2)
        env = simpy.Environment()
        net = Network(env, topo)
        net.keep_completed = True

        def starter(index: int, src: int, dst: int, size: float, at: float, weight: float):
            yield env.timeout(at)
            net.transfer(topo.ranks[src], topo.ranks[dst], size, tag=str(index), weight=weight)

        for index, spec in enumerate(specs):
            env.process(starter(index, *spec))
        env.run()
        return [(f.sent_s, f.end_s) for f in by_id(net)]
    finally:
        fairshare.INCREMENTAL_MIN_ENTRIES = saved


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 15), st.integers(0, 15), st.sampled_from([1e6, 4e6, 3e7]),
            st.sampled_from([0.0, 0.0, 1e-4, 7e-4, 2e-3]), st.sampled_from([1.0, 1.0, 0.5, 3.0]),
        ),
        min_size=1, max_size=40,
    ),
    st.booleans(),
)  # fmt: skip
def test_resumed_rate_solves_give_the_same_flow_times_as_fresh_ones(
    specs: list[tuple[int, int, float, float, float]], symmetric: bool
) -> None:
    """Flows that start, share and end at staggered times: the network's resumed max-min solves
    (MaxMinState) and fresh ones give every flow the same send and arrival times, bit for bit.
    ``symmetric``: each flow also has a mirror on the next host (same size, start and weight)."""
    if symmetric:
        specs = specs + [((s + 4) % 16, (d + 4) % 16, b, t, w) for s, d, b, t, w in specs]
    assert _staggered_run(specs, resume=True) == _staggered_run(specs, resume=False)


def test_weights_split_a_link_in_proportion_until_the_weighted_flows_are_gone() -> None:
    """On the star's 10 GB/s sink link: weights 1 and 3 get 2.5 and 7.5 GB/s. The weight-3 flow
    (7.5 GB) ends at 1 s; a plain flow started at 1.5 s then shares the link evenly with the
    weight-1 one (the network counts its weighted flows, and none is left): 5 GB/s each."""
    topo = star(3)
    env = simpy.Environment()
    net = Network(env, topo)
    net.keep_completed = True
    net.transfer("s0", "sink", 10e9, tag="0")
    net.transfer("s1", "sink", 7.5e9, tag="1", weight=3.0)

    def late():
        yield env.timeout(1.5)
        net.transfer("s2", "sink", 5e9, tag="2")

    env.process(late())
    env.run()
    first, heavy, plain = by_id(net)
    assert heavy.rate_Bps == 7.5 * GBps and heavy.sent_s == pytest.approx(1.0)
    # flow 0: 2.5 GB by 1 s, 5 GB more alone at 10 GB/s by 1.5 s, then 2.5 GB at 5 GB/s
    assert first.rate_Bps == 5 * GBps and first.sent_s == pytest.approx(2.0)
    assert plain.sent_s == pytest.approx(2.25)  # 2.5 GB at 5 by 2 s, then 2.5 GB alone at 10
