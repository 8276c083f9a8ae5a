"""PSResult records: StepReport's schema plus staleness, and the staleness prediction built on them."""

from __future__ import annotations

import json

from experiments.staleness_accuracy.predicted import predicted_staleness
from simcore.report import RECORD_FIELDS
from simcore.staleness.distribution import StalenessDistribution
from tests.paramserver_helpers import run, uniform_workload

PS_FIELDS = ("staleness", "staleness_histogram", "ssp_blocking_s", "shard_imbalance")


def test_record_has_every_step_report_field_plus_staleness() -> None:
    result = run("ps-ssp", steps=3, workload=uniform_workload(params=1_000_000))
    record = result.to_record()
    assert set(RECORD_FIELDS) <= set(record) and set(PS_FIELDS) <= set(record)
    assert record["strategy"] == "ps-ssp" and record["gpus"] == 8
    assert set(record["staleness"]) == {"mean", "p50", "p99", "max"}
    assert sum(record["staleness_histogram"].values()) == result.gradients_applied == 24
    assert len(record["ssp_blocking_s"]) == 8
    assert record["step_time_p99_s"] >= record["step_time_s"] > 0
    assert record["exposed_comm_s"] == max(0.0, record["step_time_s"] - record["compute_s"])
    assert record["bottleneck_link"] and record["link_utilisation"]
    json.dumps(record)  # JSON-ready


def test_memory_verdict_counts_the_shards_a_colocated_worker_serves() -> None:
    sync = run("ps-sync", steps=1, workload=uniform_workload(params=1_000_000))
    breakdown = sync.step.memory_breakdown
    assert breakdown["optimizer"] > 0  # rank 0 hosts a shard: its fp32 master + Adam moments + accumulator
    assert sync.step.fits and "fits" in sync.step.oom_verdict


def test_predicted_staleness_comes_from_the_simulation() -> None:
    dist = predicted_staleness("g5.12xlarge", "async", None, 4, 0)
    assert isinstance(dist, StalenessDistribution)
    assert dist.p50 == 3  # four equal workers
    assert predicted_staleness("g5.12xlarge", "sync", None, 4, 0).max_delay == 0


def test_a_dedicated_server_that_cannot_hold_its_shard_is_an_oom() -> None:
    from simcore.paramserver import Placement

    big = uniform_workload(params=200_000_000)  # 1.6B parameters: 19 GB of fp32 master + Adam state
    result = run("ps-sync", steps=1, workload=big, shards=1, placement=Placement("dedicated", 1))
    assert not result.step.fits and "server shard state" in result.step.oom_verdict
