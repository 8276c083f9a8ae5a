"""Closed-form collective costs, kept in their model per shape, price exactly what the simulated model prices."""

from __future__ import annotations

import pytest

from simcore.fastpath.costs import fast_collective_model
from simcore.step.cost import CollectiveRequest, CostModel
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


def test_a_model_prices_each_shape_once_and_keeps_it_to_itself() -> None:
    topology = load_cluster("dgx-a100", gpus=16)
    world = tuple(range(16))
    model = CostModel(topology)
    first = model.price(CollectiveRequest("all_reduce", 3e6, world))
    assert len(model.memo) == 2  # the powers of two around 3 MB
    again = model.price(CollectiveRequest("all_reduce", 3.5e6, world))
    assert len(model.memo) == 2 and again.time_s > first.time_s
    assert len(CostModel(topology).memo) == 0  # no cost is shared through the module
    model.memo.clear()
    assert len(model.memo) == 0
    assert model.price(CollectiveRequest("all_reduce", 3e6, world)) == first
