"""The what-if sweep builds every cluster with the loader it is handed (simcore reads no cluster files)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simcore.paramserver import Placement, PSConfig
from simcore.strategies.base import TrainingConfig
from simcore.topology import Topology
from simcore.whatif.sweep import run_what_if
from tests.paramserver_helpers import uniform_workload
from topologies import load_cluster

CONFIG = TrainingConfig(global_batch=8, micro_batch=4, dtype="bf16", optimizer="adamw")


class CountingLoader:
    """``topologies.load_cluster``, remembering what it was asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None, int | None]] = []

    def __call__(self, name: str, /, *, gpus: int | None = None, nodes: int | None = None) -> Topology:
        self.calls.append((name, gpus, nodes))
        return load_cluster(name, gpus=gpus, nodes=nodes)


def test_every_point_is_built_by_the_handed_loader() -> None:
    loader = CountingLoader()
    result = run_what_if(
        uniform_workload(layers=2, params=100_000),
        ["g5.12xlarge"],
        [2],
        loader=loader,
        strategies=["ddp"],
        config=CONFIG,
    )
    assert sorted(loader.calls) == [("g5.12xlarge", 1, None), ("g5.12xlarge", 2, None)]
    assert [r.gpus for r in result.reports] == [2]


def test_dedicated_servers_grow_the_cluster_through_the_loader() -> None:
    loader = CountingLoader()
    ps = PSConfig(shards=1, placement=Placement("dedicated", 1))
    result = run_what_if(
        uniform_workload(layers=2, params=100_000), ["g5.12xlarge"], [2], loader=loader,
        strategies=["ps-sync"], config=CONFIG, ps_options=ps,
    )  # fmt: skip
    assert ("g5.12xlarge", None, None) in loader.calls  # as given: how many devices a server has
    assert ("g5.12xlarge", None, 2) in loader.calls  # one node of workers plus one server node
    assert result.ps_results[("g5.12xlarge", "ps-sync", 2)].placement == "dedicated:1"


def test_steps_nobody_reads_are_not_kept_and_the_reports_do_not_change() -> None:
    """keep_steps=False (the CLI without --out): the fast-path points give the event-free report
    without simulating the step as well; the numbers are the simulated ones to float rounding."""
    run = {
        "workload": uniform_workload(layers=4, params=1_000_000), "clusters": ["dgx-a100"], "gpus": [8],
        "loader": load_cluster, "strategies": ["ddp", "fsdp", "zero1"], "config": replace(CONFIG, global_batch=32),
    }  # fmt: skip
    kept, lean = run_what_if(**run), run_what_if(**run, keep_steps=False)  # type: ignore[arg-type]
    assert len(kept.steps) == 6 and lean.steps == {}
    for a, b in zip(kept.reports, lean.reports, strict=True):
        assert (a.strategy, a.gpus) == (b.strategy, b.gpus)
        assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)
        assert b.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-12)
        assert b.exposed_comm_s == pytest.approx(a.exposed_comm_s, rel=1e-9, abs=1e-15)
