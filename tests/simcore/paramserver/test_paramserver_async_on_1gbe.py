"""ps-async against ps-sync with one worker per machine on 1 GbE (the MXNet 2015 cluster, issue 21).

The property of test_paramserver_throughput.py (async is slower than sync by at most its extra shard
work) is only drawn on g5.12xlarge clusters. On gtx980-1gbe with one worker per machine, colocated
shards and layer-wise pushes it fails with the shards idle: a worker's pulls start as soon as its
own push is applied and then share the NIC with the other workers' pushes still in flight, which
under fair sharing lengthens every worker's critical path; in ps-sync the pulls wait for the round.
MXNet measured the opposite on this cluster (dist_async 106-124 samples/s per worker against
dist_sync 107-113, apache/mxnet tests/python/multi-node/README.md before commit b7f33e7a4f).
"""

from __future__ import annotations

import pytest

from simcore.paramserver import PSConfig, simulate_parameter_server, summarise
from simcore.strategies.base import TrainingConfig
from tests.paramserver_helpers import uniform_workload
from topologies import load_cluster


def _rates(layerwise: bool) -> tuple[float, float, float]:
    """(sync, async samples/s, the busiest async shard's busy share) for 3 x 4M-parameter layers."""
    topology = load_cluster("gtx980-1gbe", gpus=6).subset([0, 2, 4])  # one worker per machine
    training = TrainingConfig(global_batch=48, micro_batch=16, dtype="fp32", optimizer="sgd-momentum")
    workload = uniform_workload(3, 4_000_000, 1e10)
    results = [
        summarise(
            simulate_parameter_server(
                workload, training, topology, PSConfig(mode=mode, steps=8, layerwise=layerwise)
            ),
            cluster="gtx980-1gbe",
        )
        for mode in ("ps-sync", "ps-async")
    ]
    sync, asynchronous = results
    return sync.throughput_samples_per_s, asynchronous.throughput_samples_per_s, asynchronous.server_busy


def test_whole_gradient_exchange_async_keeps_up_with_sync() -> None:
    """Without layer-wise pushes the two modes exchange the same bytes in the same order: equal."""
    sync, asynchronous, busy = _rates(layerwise=False)
    assert busy < 0.01
    assert asynchronous >= sync * 0.98


@pytest.mark.xfail(
    strict=True,
    reason="known (issue 21): layer-wise ps-async is 12% slower than ps-sync here with idle shards; "
    "remove this mark when the pipelined async worker keeps up",
)
def test_layerwise_async_keeps_up_with_sync() -> None:
    sync, asynchronous, busy = _rates(layerwise=True)
    assert busy < 0.01  # nothing on the shards explains a gap
    assert asynchronous >= sync * 0.98
