"""Closed-form collective costs, cached per shape, price exactly what the simulated model prices."""

from __future__ import annotations

import pytest

from simcore.fastpath.costs import clear_cost_cache, cost_cache_size, fast_collective_model, topology_key
from simcore.strategies.runner import collective_model, rank_groups
from topologies import load_cluster


@pytest.mark.parametrize("cluster", ["dgx-a100", "g5.48xlarge", "pcie-nvl-pairs"])
def test_fast_model_prices_as_the_simulated_one(cluster: str) -> None:
    topology = load_cluster(cluster, gpus=16)
    simulated, fast = collective_model(topology), fast_collective_model(topology)
    for group in rank_groups(topology):
        if len(group) < 2:
            continue
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for size in (512.0, 4096.0, 3e6, 25 * 2**20, 7.7e8):
                want, got = simulated(op, size, group), fast(op, size, group)
                assert got.time_s == pytest.approx(want.time_s, rel=1e-9)
                assert (got.bottleneck_link, got.link_kind) == (want.bottleneck_link, want.link_kind)


def test_a_reloaded_cluster_reuses_the_cached_shapes() -> None:
    clear_cost_cache()
    first, again = load_cluster("dgx-a100", gpus=16), load_cluster("dgx-a100", gpus=16)
    assert topology_key(first) == topology_key(again)
    assert topology_key(first) != topology_key(load_cluster("dgx-a100", gpus=8))
    world = tuple(range(16))
    fast_collective_model(first)("all_reduce", 3e6, world)
    cached = cost_cache_size()
    assert cached == 2  # the powers of two around 3 MB
    fast_collective_model(again)("all_reduce", 3.5e6, world)
    assert cost_cache_size() == cached
