"""Collectives against their cost model, on random clusters built here.

Where nothing competes, the discrete-event time of every algorithm and protocol equals its closed
form, the aggregate and per-step modes agree, more bandwidth or fewer bytes is never slower, and
bytes on each link are what the plan says. The protocol NCCL's tuning picks is never slower than
any fixed protocol, and the algorithm it picks is the fastest candidate. Under contention, k equal
collectives on one bottleneck each take k times as long (in their link-bound term), sub-groups
slow each other exactly when they share a link, and concurrent same-shape groups priced together
take what running them together in the simulation takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore.collectives import (
    ALGORITHMS,
    PROTOCOLS,
    AlgorithmUnavailable,
    CollectiveResult,
    build_plan,
    collective_time,
    concurrent_collective_time,
    price,
    start_collective,
)
from simcore.collectives.closed_form import plan_time
from simcore.collectives.cost import tuner_time_s
from simcore.collectives.options import DEFAULT_OPTIONS
from simcore.collectives.selection import candidates
from simcore.engine import Simulation
from simcore.net.network import Network
from simcore.topology import Topology

GBps = 1e9
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _duplex(g: nx.DiGraph, a: str, b: str, bandwidth_Bps: float, latency_s: float, kind: str) -> None:
    g.add_edge(a, b, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, kind=kind)
    g.add_edge(b, a, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, kind=kind)


@st.composite
def clusters(draw: st.DrawFn, min_hosts: int = 1, max_hosts: int = 3, max_gpus: int = 4) -> Topology:
    """Hosts of GPUs on a host switch (NVLink with or without NVLS, or PCIe without peer-to-peer,
    staged through the host's CPU) and one fabric switch (SHARP or not).

    A host reaches the fabric through one shared NIC on its switch, or (rail style) through one
    NIC per GPU, attached to that GPU. GPUs are A100s or H100s (NCCL's tables differ).
    """
    hosts = draw(st.integers(min_hosts, max_hosts))
    gpus = draw(st.integers(1, max_gpus))
    nic_per_gpu = draw(st.booleans())
    gpu = draw(st.sampled_from(["a100-sxm-80gb", "h100-sxm"]))
    intra = draw(st.sampled_from(["nvswitch", "pcie"]))
    bandwidths = st.sampled_from([5, 12.5, 25, 50, 100, 300])
    latencies = st.sampled_from([0.0, 0.2e-6, 0.5e-6, 1e-6, 2e-6])
    g = nx.DiGraph()
    g.add_node("leaf0", kind="switch", host=-1, in_network_reduction=draw(st.sampled_from(["", "sharp"])))
    ranks = []
    for h in range(hosts):
        reduction = draw(st.sampled_from(["", "nvls"])) if intra == "nvswitch" else ""
        g.add_node(f"h{h}/nvswitch", kind="switch", host=h, in_network_reduction=reduction)
        g.add_node(f"h{h}/cpu0", kind="cpu", host=h)
        _duplex(g, f"h{h}/cpu0", f"h{h}/nvswitch", draw(bandwidths) * GBps, draw(latencies), "memory")
        for i in range(gpus):
            g.add_node(f"h{h}/gpu{i}", kind="gpu", host=h, gpu=gpu, p2p=intra == "nvswitch")
            _duplex(g, f"h{h}/gpu{i}", f"h{h}/nvswitch", draw(bandwidths) * GBps, draw(latencies), intra)
            ranks.append(f"h{h}/gpu{i}")
        for k in range(gpus if nic_per_gpu else 1):
            g.add_node(f"h{h}/nic{k}", kind="nic", host=h)
            near = f"h{h}/gpu{k}" if nic_per_gpu else f"h{h}/nvswitch"
            _duplex(g, near, f"h{h}/nic{k}", draw(bandwidths) * GBps, draw(latencies), "pcie")
            _duplex(g, f"h{h}/nic{k}", "leaf0", draw(bandwidths) * GBps, draw(latencies), "ib")
    return Topology("random", g, ranks, {"gpus_per_host": gpus})


def _cases(topology: Topology) -> list[tuple[str, str]]:
    cases = []
    for op, algos in ALGORITHMS.items():
        for algo in algos:
            try:
                price(topology, op, 1e6, algorithm=algo)
            except AlgorithmUnavailable:
                continue
            cases.append((op, algo))
    return cases


def _protocols(topology: Topology, op: str, algo: str) -> list[str]:
    out = []
    for proto in PROTOCOLS:
        try:
            price(topology, op, 1e6, algorithm=algo, protocol=proto)
        except AlgorithmUnavailable:
            continue
        out.append(proto)
    return out


def _close(a: float, b: float, rel: float = 0.01) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-15


@SETTINGS
@given(clusters(), st.sampled_from([0, 8, 4096, 1 << 20, 1 << 28]))
def test_simulated_time_equals_closed_form_and_modes_agree(topology: Topology, size: int) -> None:
    """Nothing competes: DES (both modes) == closed form, for every runnable algorithm and protocol.

    The flows of a phase share links in proportion to their bytes, so they finish together when the
    most loaded link drains, whatever their sizes (plain max-min fairness let small flows finish
    first and leave a bottleneck link idle: the tree at 1 MiB on 12 ranks took longer than its
    closed form)."""
    for op, algo in _cases(topology):
        for proto in _protocols(topology, op, algo):
            aggregate = collective_time(topology, op, size, algorithm=algo, protocol=proto)
            per_step = collective_time(topology, op, size, algorithm=algo, protocol=proto, mode="per-step")
            assert _close(aggregate.time_s, aggregate.closed_form_s), (op, algo, proto, aggregate)
            assert _close(per_step.time_s, aggregate.time_s), (op, algo, proto, per_step, aggregate)


def _ranked(topology: Topology, op: str, size: int, algo: str | None, proto: str | None = None) -> float:
    """What NCCL's model predicts for the pair it runs (or the pinned one): the selection's key."""
    priced = price(topology, op, size, algorithm=algo, protocol=proto)
    plan = build_plan(topology, op, size, algorithm=priced.algorithm, protocol=priced.protocol)
    return tuner_time_s(plan, priced.costs, priced.protocol, size, priced.info)


@SETTINGS
@given(clusters(), st.sampled_from([8, 4096, 1 << 20, 1 << 26]))
def test_protocol_choice_ranks_first_in_nccls_model(topology: Topology, size: int) -> None:
    for op, algo in _cases(topology):
        chosen = _ranked(topology, op, size, algo)
        for proto in _protocols(topology, op, algo):
            assert chosen <= _ranked(topology, op, size, algo, proto) * (1 + 1e-9), (op, algo, proto)


@SETTINGS
@given(clusters(), st.sampled_from([8, 4096, 1 << 20, 1 << 26]))
def test_algorithm_choice_ranks_first_in_nccls_model(topology: Topology, size: int) -> None:
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        info = price(topology, op, size).info
        best = min(_ranked(topology, op, size, a) for a in candidates(op, info, DEFAULT_OPTIONS))
        assert _ranked(topology, op, size, None) == pytest.approx(best, rel=1e-12)


def _scaled(topology: Topology, factor: float, edge: tuple[str, str] | None) -> Topology:
    g = topology.graph.copy()
    for u, v in [edge, edge[::-1]] if edge else list(g.edges):
        g.edges[u, v]["bandwidth_Bps"] *= factor
    return Topology(topology.name, g, list(topology.ranks), dict(topology.metadata))


@SETTINGS
@given(clusters(), st.integers(1, 1 << 28), st.floats(1.0, 8.0), st.booleans(), st.data())
def test_more_bandwidth_or_fewer_bytes_is_never_slower(
    topology: Topology, size: int, factor: float, one_link: bool, data: st.DataObject
) -> None:
    edges = sorted(topology.graph.edges)
    edge = data.draw(st.sampled_from(edges)) if one_link else None
    faster = _scaled(topology, factor, edge)
    smaller = data.draw(st.integers(0, size))
    # A pinned pair's price, and the choice in NCCL's model (the price of the pair NCCL runs can rise
    # where its model switches to a pair it misjudges, as NCCL's own choice does).
    for op, algo in _cases(topology):
        base = _ranked(topology, op, size, algo)
        assert _ranked(faster, op, size, algo) <= base * (1 + 1e-9)
        assert _ranked(topology, op, smaller, algo) <= base * (1 + 1e-9)
        for proto in _protocols(topology, op, algo):
            fixed = collective_time(topology, op, size, algorithm=algo, protocol=proto).time_s
            quicker = collective_time(faster, op, size, algorithm=algo, protocol=proto).time_s
            less = collective_time(topology, op, smaller, algorithm=algo, protocol=proto).time_s
            assert less <= fixed * (1 + 1e-9) and quicker <= fixed * (1 + 1e-9), (op, algo, proto)
    auto = _ranked(topology, "all_reduce", size, None)
    assert _ranked(faster, "all_reduce", size, None) <= auto * (1 + 1e-9)


@SETTINGS
@given(
    clusters(),
    st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "ps_push", "all_to_all"]),
)
def test_link_bytes_are_what_the_plan_moves(topology: Topology, op: str) -> None:
    """Bytes are conserved: each link carries exactly the plan's load for it."""
    plan = build_plan(topology, op, 1 << 24)
    sim = Simulation(0)
    network = Network(sim.env, topology)
    sim.run(
        start_collective(
            sim, network, op, 1 << 24, plan.group, algorithm=plan.algorithm, protocol=plan.protocol
        )
    )
    expected: dict[tuple[str, str], float] = {}
    for phase in plan.phases:
        for edge, load in phase.link_loads().items():
            expected[edge] = expected.get(edge, 0.0) + load
    carried = {e: s.bytes for e, s in network.stats.items() if s.bytes > 0}
    assert set(carried) == {e for e, b in expected.items() if b > 0}
    for edge, load in expected.items():
        assert carried[edge] == pytest.approx(load, rel=1e-6)


def _run_together(
    topology: Topology, jobs: Sequence[tuple[str, float, tuple[int, ...], str]], protocol: str | None = None
) -> list[float]:
    sim = Simulation(0)
    network = Network(sim.env, topology)
    procs = [
        start_collective(sim, network, op, size, group, algorithm=algo, protocol=protocol)
        for op, size, group, algo in jobs
    ]
    sim.run()
    return [cast(CollectiveResult, p.value).time_s for p in procs]


@SETTINGS
@given(clusters(min_hosts=1), st.integers(2, 4), st.sampled_from(["ring", "tree", "direct"]))
def test_k_equal_collectives_on_one_bottleneck_take_k_times_as_long(
    topology: Topology, k: int, algo: str
) -> None:
    """k equal collectives: each phase's link-bound time grows k-fold (the protocol's throughput
    floor and the latency do not)."""
    size = 1 << 26
    group = tuple(range(topology.world_size))
    if len(group) < 2:
        return
    priced = price(topology, "all_reduce", size, group, algorithm=algo, protocol="Simple")
    expected = sum(c.latency_s + max(k * c.link_s, c.engine_s) for c in priced.costs)
    together = _run_together(topology, [("all_reduce", size, group, algo)] * k, "Simple")
    for t in together:
        assert _close(t, expected)


@st.composite
def symmetric_clusters(draw: st.DrawFn) -> Topology:
    """Identical hosts of identical GPUs (one drawn figure per link class), as HSDP's groups assume."""
    hosts, gpus = draw(st.integers(2, 3)), draw(st.integers(1, 4))
    nic_per_gpu = draw(st.booleans())
    bandwidths = st.sampled_from([5, 12.5, 25, 50, 100, 300])
    latencies = st.sampled_from([0.0, 0.5e-6, 1e-6])
    up = [(draw(bandwidths) * GBps, draw(latencies))] * gpus
    nic = [(draw(bandwidths) * GBps, draw(latencies), draw(bandwidths) * GBps)] * gpus
    g = nx.DiGraph()
    g.add_node("leaf0", kind="switch", host=-1, in_network_reduction="")
    ranks = []
    for h in range(hosts):
        g.add_node(f"h{h}/nvswitch", kind="switch", host=h, in_network_reduction="")
        for i in range(gpus):
            g.add_node(f"h{h}/gpu{i}", kind="gpu", host=h, gpu="a100-sxm-80gb")
            _duplex(g, f"h{h}/gpu{i}", f"h{h}/nvswitch", up[i][0], up[i][1], "nvswitch")
            ranks.append(f"h{h}/gpu{i}")
        for k in range(gpus if nic_per_gpu else 1):
            g.add_node(f"h{h}/nic{k}", kind="nic", host=h)
            near = f"h{h}/gpu{k}" if nic_per_gpu else f"h{h}/nvswitch"
            _duplex(g, near, f"h{h}/nic{k}", nic[k][0], nic[k][1], "pcie")
            _duplex(g, f"h{h}/nic{k}", "leaf0", nic[k][2], 1e-6, "ib")
    return Topology("symmetric", g, ranks, {"gpus_per_host": gpus})


@SETTINGS
@given(symmetric_clusters(), st.sampled_from([1 << 12, 1 << 24]))
def test_concurrent_groups_priced_together_match_running_them_together(topology: Topology, size: int) -> None:
    """One group per local rank (HSDP's replicate groups) on identical hosts: the closed form of
    the groups together equals the first group's time when all of them start at once."""
    per_host = [topology.ranks_on_host(h) for h in topology.hosts]
    g = min(map(len, per_host))
    groups = [tuple(ranks[i] for ranks in per_host) for i in range(g)]
    together = concurrent_collective_time(topology, "all_reduce", size, groups)
    jobs = [("all_reduce", float(size), grp, together.algorithm) for grp in groups]
    simulated = _run_together(topology, jobs, together.protocol)
    assert _close(simulated[0], together.time_s)
    alone = collective_time(topology, "all_reduce", size, groups[0], algorithm=together.algorithm,
                            protocol=together.protocol).time_s  # fmt: skip
    assert together.time_s >= alone * (1 - 1e-9)


@SETTINGS
@given(clusters(min_hosts=2, max_hosts=3, max_gpus=3))
def test_sub_groups_slow_each_other_only_when_they_share_a_link(topology: Topology) -> None:
    per_host = [topology.ranks_on_host(h) for h in topology.hosts]
    if min(map(len, per_host)) < 2:
        return
    size = 1 << 26
    # Disjoint: each group stays inside its own host.
    a, b = tuple(per_host[0]), tuple(per_host[1])
    alone = [collective_time(topology, "all_reduce", size, g, algorithm="ring").time_s for g in (a, b)]
    together = _run_together(topology, [("all_reduce", size, a, "ring"), ("all_reduce", size, b, "ring")])
    assert together == pytest.approx(alone, rel=1e-9)
    if topology.graph.nodes["h0/gpu0"]["p2p"] is False:
        return  # staged through each host's CPU: still disjoint, but the shared-NIC check below needs P2P
    # Sharing: both groups cross the same NICs (one per host); contention never speeds anyone up,
    # and once the shared NIC links are the bottleneck, both groups slow down.
    a, b = (per_host[0][0], per_host[1][0]), (per_host[0][1], per_host[1][1])
    jobs = [("all_reduce", size, a, "ring"), ("all_reduce", size, b, "ring")]
    alone = [collective_time(topology, "all_reduce", size, g, algorithm="ring").time_s for g in (a, b)]
    assert all(t >= s * (1 - 1e-9) for t, s in zip(_run_together(topology, jobs), alone, strict=True))
    g = topology.graph.copy()
    for u, v in g.edges:
        if "leaf0" in (u, v):
            g.edges[u, v]["bandwidth_Bps"] = 1 * GBps
    thin = Topology("thin-nics", g, list(topology.ranks))
    alone = [collective_time(thin, "all_reduce", size, grp, algorithm="ring").time_s for grp in (a, b)]
    together = _run_together(thin, jobs)
    links = [
        {
            e
            for ph in build_plan(thin, "all_reduce", size, grp, algorithm="ring").phases
            for e in ph.link_loads()
        }
        for grp in (a, b)
    ]
    if any("leaf0" in e for e in links[0] & links[1]):  # one NIC per host: both cross it
        assert min(t / s for t, s in zip(together, alone, strict=True)) > 1.5
    else:  # a NIC per GPU: the groups use different rails and do not meet
        assert together == pytest.approx(alone, rel=1e-9)


@SETTINGS
@given(clusters(min_hosts=2), st.integers(1, 1 << 28))
def test_same_inputs_give_identical_results(topology: Topology, size: int) -> None:
    group = tuple(range(topology.world_size))
    jobs = [("all_reduce", size, group, "ring"), ("all_gather", size / 2, group, "ring")]
    assert _run_together(topology, jobs) == _run_together(topology, jobs)
    first = collective_time(topology, "all_reduce", size)
    copy = Topology(topology.name, topology.graph.copy(), list(topology.ranks), dict(topology.metadata))
    assert collective_time(copy, "all_reduce", size) == first


@SETTINGS
@given(clusters(min_hosts=1, max_hosts=1, max_gpus=6), st.integers(1, 1 << 30))
def test_ring_matches_nccls_formula_on_a_uniform_switch(topology: Topology, size: int) -> None:
    """On an NVLink switch with equal links, ring/Simple all_reduce = 8.4 us + 2(p-1) x 3.4 us
    (NCCL's base and per-hop latencies) + 2(p-1)/p S/B."""
    g = topology.graph.copy()
    for u, v in g.edges:
        g.edges[u, v].update(bandwidth_Bps=50 * GBps, latency_s=1e-6, kind="nvswitch")
    for gpu in topology.ranks:
        g.nodes[gpu]["p2p"] = True
    uniform = Topology("uniform", g, list(topology.ranks))
    p = uniform.world_size
    latency = (8.4 + 2 * (p - 1) * 3.4) * 1e-6
    expected = 0.0 if p == 1 else 2 * (p - 1) / p * size / (50 * GBps) + latency
    result = collective_time(uniform, "all_reduce", size, algorithm="ring", protocol="Simple")
    assert result.closed_form_s == pytest.approx(expected, rel=1e-9)
    assert result.time_s == pytest.approx(expected, rel=1e-6)
    plan = build_plan(uniform, "all_reduce", size, algorithm="ring", protocol="Simple")
    assert plan_time(uniform, plan) == pytest.approx(result.closed_form_s, rel=1e-12)
