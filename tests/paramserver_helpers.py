"""Small workloads and runs shared by the parameter-server tests (kept tiny: the CPUs are shared)."""

from __future__ import annotations

from functools import cache

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity
from simcore.paramserver import (
    Placement,
    PSConfig,
    PSResult,
    load_ps_cluster,
    simulate_parameter_server,
    summarise,
)
from simcore.strategies.base import TrainingConfig
from simcore.topology import Topology
from simcore.workload.types import Layer, Workload
from topologies import load_cluster


def uniform_workload(
    layers: int = 8, params: int = 4_000_000, fwd_flops: float = 2e9, name: str = "uniform"
) -> Workload:
    """``layers`` identical linear layers in one block each: sharding is exact when shards divide layers."""
    block = [
        Layer(f"fc{i}", "linear", i, params, fwd_flops, 2 * fwd_flops, 4096.0, 4096.0, 8192.0)
        for i in range(layers)
    ]
    return Workload(name, tuple(block), tuple(f"block{i}" for i in range(layers)), "bf16", 0, "test workload")


def training(workers: int, micro_batch: int = 4) -> TrainingConfig:
    return TrainingConfig(
        global_batch=workers * micro_batch, micro_batch=micro_batch, dtype="bf16", optimizer="adamw"
    )


@cache
def cluster(name: str, workers: int, placement: Placement) -> Topology:
    return load_ps_cluster(name, workers, placement, loader=load_cluster)


def run(
    mode: str,
    *,
    workers: int = 8,
    cluster_name: str = "g5.12xlarge",
    steps: int = 4,
    shards: int | None = None,
    placement: Placement | None = None,
    bound: int = 2,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    workload: Workload | None = None,
    seed: int = 0,
    layerwise: bool = True,
    serial_server: bool | None = None,
) -> PSResult:
    placement = placement or Placement()
    topo = cluster(cluster_name, workers, placement)
    ps = PSConfig(
        mode=mode, shards=shards, placement=placement, staleness_bound=bound, steps=steps, layerwise=layerwise,
        serial_server=serial_server,
    )  # fmt: skip
    outcome = simulate_parameter_server(
        workload or uniform_workload(),
        training(workers),
        topo,
        ps,
        workers=workers,
        heterogeneity=heterogeneity,
        seed=seed,
    )
    return summarise(outcome, cluster=cluster_name)
