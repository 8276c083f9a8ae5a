"""Strategies on real cluster graphs and the real compute model: theory's invariants end to end."""

from __future__ import annotations

import pytest

from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import make_context, simulate_step
from simcore.topology import Topology
from simcore.workload.loader import load_workload

topologies = pytest.importorskip("topologies")

CONFIG = TrainingConfig(global_batch=32, micro_batch=2)


def _scaled(topology: Topology, factor: float) -> Topology:
    graph = topology.graph.copy()
    for _, _, attrs in graph.edges(data=True):
        attrs["bandwidth_Bps"] = attrs["bandwidth_Bps"] * factor
    return Topology(topology.name, graph, list(topology.ranks), dict(topology.metadata))


@pytest.fixture(scope="module")
def workload():
    return load_workload("gpt2-small", seq_len=512, dtype="bf16")


@pytest.mark.parametrize("name", strategy_names())
@pytest.mark.parametrize("cluster", ["dgx-a100", "g5.48xlarge"])
def test_more_bandwidth_on_every_link_is_never_slower(name: str, cluster: str, workload) -> None:
    base = topologies.load_cluster(cluster, gpus=16)
    times = []
    for factor in (0.5, 1.0, 4.0):
        ctx = make_context(workload, CONFIG, _scaled(base, factor))
        times.append(simulate_step(get_strategy(name), ctx, slowdown=1.1).run.step_time_s)
    assert times[0] >= times[1] * (1 - 1e-9) and times[1] >= times[2] * (1 - 1e-9), times


@pytest.mark.parametrize("name", strategy_names())
def test_real_cluster_step_is_deterministic_and_covers_compute(name: str, workload) -> None:
    topology = topologies.load_cluster("dgx-a100", gpus=16)
    runs = [
        simulate_step(get_strategy(name), make_context(workload, CONFIG, topology), seed=5, slowdown=1.1)
        for _ in range(2)
    ]
    assert runs[0].run.step_time_s == runs[1].run.step_time_s
    assert runs[0].run.spans == runs[1].run.spans
    assert runs[0].run.step_time_s >= runs[0].plan.compute_s()


def test_one_gpu_of_a_real_cluster_moves_no_bytes(workload) -> None:
    ctx = make_context(workload, CONFIG, topologies.load_cluster("g5.48xlarge", gpus=1))
    for name in strategy_names():
        result = simulate_step(get_strategy(name), ctx)
        assert result.plan.comm_bytes() == 0
        assert result.run.step_time_s == pytest.approx(result.plan.compute_s(), rel=1e-12)
