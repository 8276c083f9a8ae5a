"""Max-min fair rates: feasibility, the bottleneck characterisation, and known small cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.net import fairshare
from simcore.net.fairshare import MaxMinState, max_min_rates


def incidence(routes: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    links = np.array([link for route in routes for link in route], dtype=np.intp)
    flows = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    return links, flows


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[list[int]], np.ndarray]:
    n_links = draw(st.integers(1, 8))
    capacity = np.array(
        draw(st.lists(st.sampled_from([1.0, 2.0, 3.0, 10.0, 25e9]), min_size=n_links, max_size=n_links))
    )
    routes = draw(
        st.lists(
            st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True),
            min_size=1,
            max_size=12,
        )
    )
    return routes, capacity


@settings(max_examples=200, deadline=None)
@given(problems())
def test_rates_are_max_min_fair(problem: tuple[list[list[int]], np.ndarray]) -> None:
    """Feasible, and every flow has a saturated link on which no flow is faster (Bertsekas-Gallager)."""
    routes, capacity = problem
    links, flows = incidence(routes)
    rates = max_min_rates(links, flows, len(routes), capacity)
    load = np.bincount(links, weights=rates[flows], minlength=len(capacity))
    assert np.all(rates > 0)
    assert np.all(load <= capacity * (1 + 1e-9))
    for f, route in enumerate(routes):
        bottlenecks = [
            link
            for link in route
            if load[link] >= capacity[link] * (1 - 1e-9)
            and all(rates[g] <= rates[f] * (1 + 1e-9) for g, other in enumerate(routes) if link in other)
        ]
        assert bottlenecks, f"flow {f} could grow without slowing a flow that is no faster"


@settings(max_examples=50, deadline=None)
@given(k=st.integers(1, 5000), capacity=st.floats(1.0, 1e12))
def test_k_flows_on_one_link_get_exactly_a_kth(k: int, capacity: float) -> None:
    links, flows = incidence([[0]] * k)
    rates = max_min_rates(links, flows, k, np.array([capacity]))
    assert np.all(rates == capacity / k)


def test_the_textbook_parking_lot() -> None:
    """One long flow over links 0 and 1, one short flow on each: all get half (links of 2)."""
    rates = max_min_rates(*incidence([[0, 1], [0], [1]]), 3, np.array([2.0, 2.0]))
    assert rates.tolist() == [1.0, 1.0, 1.0]


def test_a_flow_limited_elsewhere_leaves_its_share_to_the_others() -> None:
    """Flow 0 is capped at 1 by link 1, so flow 1 takes the remaining 9 of link 0."""
    rates = max_min_rates(*incidence([[0, 1], [0]]), 2, np.array([10.0, 1.0]))
    assert rates.tolist() == pytest.approx([1.0, 9.0])


def test_thousands_of_ring_hops_of_two_kinds_get_two_rates() -> None:
    """4096 ring hops of two kinds (fast inside servers, slow between) settle in two levels."""
    routes = [[i] if i % 8 else [i, 4096 + i // 8] for i in range(4096)]
    capacity = np.array([300e9] * 4096 + [25e9] * 512)
    rates = max_min_rates(*incidence(routes), 4096, capacity)
    assert sorted(set(rates.tolist())) == [25e9, 300e9]


def test_plain_fairness_can_idle_a_bottleneck_that_size_weights_keep_busy() -> None:
    """Flows A (links 0+1) and B (0+2) load link 0 most (2 bytes); small flows share links 1 and 2.
    Plain max-min holds A and B to 1/3 on links 1 and 2, leaving link 0 a third idle, so the
    phase outlasts link 0's 2 s; weighted by bytes, every flow finishes by then."""
    routes = [[0, 1], [0, 2], [1], [1], [2], [2]]
    sizes = np.array([1.0, 1.0, 0.4, 0.4, 0.4, 0.4])
    capacity = np.array([1.0, 1.0, 1.0])
    plain = max_min_rates(*incidence(routes), len(routes), capacity)
    assert plain[0] == pytest.approx(1 / 3)  # link 0 carries only 2/3
    weighted = max_min_rates(*incidence(routes), len(routes), capacity, sizes)
    loads = np.bincount(incidence(routes)[0], weights=sizes[incidence(routes)[1]]) / capacity
    assert np.max(sizes / weighted) == pytest.approx(loads.max())  # everyone done when link 0 drains


@settings(max_examples=200, deadline=None)
@given(problems(), st.lists(st.sampled_from([0.1, 0.5, 1.0, 3.0]), min_size=12, max_size=12))
def test_weighted_rates_stay_feasible_and_finish_by_the_busiest_link(
    problem: tuple[list[list[int]], np.ndarray], draws: list[float]
) -> None:
    routes, capacity = problem
    sizes = np.array(draws[: len(routes)])
    links, flows = incidence(routes)
    rates = max_min_rates(links, flows, len(routes), capacity, sizes)
    used = np.bincount(links, weights=rates[flows], minlength=len(capacity))
    assert np.all(used <= capacity * (1 + 1e-9))
    drain = np.bincount(links, weights=sizes[flows], minlength=len(capacity)) / capacity
    assert np.max(sizes / rates) <= drain.max() * (1 + 1e-9)


def reference_rates(
    links: np.ndarray, flows: np.ndarray, n_flows: int, capacity: np.ndarray, weights: np.ndarray | None
) -> np.ndarray:
    """Progressive filling as first written (weights of one gathered per entry, every pass)."""
    n_links = len(capacity)
    rates, spare = np.zeros(n_flows), capacity.astype(np.float64).copy()
    weight = np.ones(n_flows) if weights is None else weights
    while len(links):
        unfixed = np.bincount(links, weights=weight[flows], minlength=n_links)
        used = unfixed > 0
        share = np.full(n_links, np.inf)
        share[used] = spare[used] / unfixed[used]
        level = float(share.min())
        tight = share <= level * (1.0 + 1e-12)
        newly = np.zeros(n_flows, dtype=bool)
        newly[flows[tight[links]]] = True
        rates[newly] = level * weight[newly]
        leaving = newly[flows]
        spare -= level * np.bincount(links[leaving], weights=weight[flows[leaving]], minlength=n_links)
        np.maximum(spare, 0.0, out=spare)
        links, flows = links[~leaving], flows[~leaving]
    return rates


@given(problems(), st.booleans())
@settings(max_examples=80, deadline=None)
def test_rates_equal_the_plain_progressive_filling_bit_for_bit(
    problem: tuple[list[list[int]], np.ndarray], weighted: bool
) -> None:
    # The unit-weight shortcut (counts for summed ones) and the weighted path: the same floats.
    routes, capacity = problem
    links, flows = incidence(routes)
    weights = np.linspace(0.5, 3.0, len(routes)) if weighted else None
    got = max_min_rates(links, flows, len(routes), capacity, weights)
    assert got.tolist() == reference_rates(links, flows, len(routes), capacity, weights).tolist()
    if not weighted:
        ones = max_min_rates(links, flows, len(routes), capacity, np.ones(len(routes)))
        assert got.tolist() == ones.tolist()


# --- resuming from the first pass a change reaches (MaxMinState) -------------------------------


def test_a_departure_resumes_at_its_own_pass_and_an_arrival_where_it_bites(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Links of 10 and 4; A on link 0, B on both, C on link 1. Pass 0: link 1 at 4/2 = 2 fixes
    B and C; pass 1: link 0 gives A the 10 - 2 = 8 left. A leaves: pass 0 is kept and nothing is
    left to fill (0 passes). D arrives on link 0: in pass 0 link 0 would share 10 among B and D,
    5 > 2, so pass 0 is kept again and one pass gives D the 8 (1 pass). E arrives on link 1: in
    pass 0 link 1 would share 4 among B, C and E, 4/3 < 2, so everything is filled again."""
    monkeypatch.setattr(fairshare, "INCREMENTAL_MIN_ENTRIES", 0)
    state = MaxMinState(np.array([10.0, 4.0]))
    links, flows = incidence([[0], [0, 1], [1]])
    assert state.solve(links, flows, 3).tolist() == [8.0, 2.0, 2.0]
    assert state.passes_run == 2
    links, flows = incidence([[0, 1], [1]])  # A left
    assert state.solve(links, flows, 2, keep=np.array([False, True, True]), new=0).tolist() == [2.0, 2.0]
    assert state.passes_run == 2
    links, flows = incidence([[0, 1], [1], [0]])  # D arrived
    assert state.solve(links, flows, 3, keep=np.array([True, True]), new=1).tolist() == [2.0, 2.0, 8.0]
    assert state.passes_run == 3
    links, flows = incidence([[0, 1], [1], [0], [1]])  # E arrived
    got = state.solve(links, flows, 4, keep=np.array([True, True, True]), new=1)
    assert got.tolist() == [4 / 3, 4 / 3, 10 - 4 / 3, 4 / 3]
    assert state.passes_run == 5  # both passes again


@st.composite
def histories(draw: st.DrawFn) -> tuple[np.ndarray, list[list[list[int]]], list[list[bool]], bool]:
    """Capacities, then a few rounds of (routes that arrive, which of the flows before survive).

    Symmetric cases (equal capacities, routes that are copies of each other: ties within the
    level tolerance) are drawn as often as asymmetric ones."""
    n_links = draw(st.integers(1, 8))
    symmetric = draw(st.booleans())
    choices = [4.0] if symmetric else [1.0, 2.0, 3.0, 10.0, 25e9]
    capacity = np.array(draw(st.lists(st.sampled_from(choices), min_size=n_links, max_size=n_links)))
    route = st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True)
    arrivals, survivors = [], []
    alive = 0
    for _ in range(draw(st.integers(1, 6))):
        keep = draw(st.lists(st.booleans(), min_size=alive, max_size=alive))
        if symmetric:
            new = draw(st.lists(route, min_size=0, max_size=3)) * draw(st.integers(1, 3))
        else:
            new = draw(st.lists(route, min_size=0, max_size=6))
        if sum(keep) + len(new) == 0:
            new = [[0]]
        survivors.append(keep)
        arrivals.append(new)
        alive = sum(keep) + len(new)
    return capacity, arrivals, survivors, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(histories())
def test_resumed_solves_equal_solves_from_scratch_bit_for_bit(
    history: tuple[np.ndarray, list[list[list[int]]], list[list[bool]], bool],
) -> None:
    capacity, arrivals, survivors, weighted = history
    saved = fairshare.INCREMENTAL_MIN_ENTRIES
    fairshare.INCREMENTAL_MIN_ENTRIES = 0  # (not monkeypatch: hypothesis reruns the body)
    try:
        state = MaxMinState(capacity)
        routes: list[list[int]] = []
        weights: list[float] = []
        for step, (new, keep) in enumerate(zip(arrivals, survivors, strict=True)):
            routes = [r for r, k in zip(routes, keep, strict=True) if k] + new
            weights = [w for w, k in zip(weights, keep, strict=True) if k] + [
                0.5 + (len(weights) + i) % 3 for i in range(len(new))
            ]
            links, flows = incidence(routes)
            w = np.array(weights) if weighted else None
            if step == 0:
                got = state.solve(links, flows, len(routes), w)
            else:
                got = state.solve(links, flows, len(routes), w, keep=np.array(keep, dtype=bool), new=len(new))
            assert got.tolist() == max_min_rates(links, flows, len(routes), capacity, w).tolist()
    finally:
        fairshare.INCREMENTAL_MIN_ENTRIES = saved
