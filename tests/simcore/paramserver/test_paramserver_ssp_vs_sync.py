"""ps-ssp against ps-sync on the same run (a property over stragglers and bounds).

SSP relaxes the barrier: a worker may run up to s clocks ahead of the slowest instead of 0, and a
worker the gate will hold pulls once it may go on (not at once and again after waiting); at s = 0
it is the barrier itself and runs as ps-sync (Ho et al. 2013). What it still pays that the barrier
does not: its shards apply every gradient as its own update (W a round to ps-sync's one), which
shows where the shard's update is on the critical path (small compute, big shards). Measured on
40 random cases of the space below: worst 0.99 of ps-sync's rate with s >= 1 (before: 0.85 behind a
2x straggler at s = 1, 0.83 at s = 0).

Not "never slower" behind a straggler when the server's links are the bottleneck: a probe of 40
cases found 0.914 (8 workers, s = 2, a 4x straggler, 4 M parameters, 2e9 FLOPs). Once the gate
closes the straggler is the critical path, and its push and pull share the server's links fairly
with the fast workers' traffic, which in ps-sync happens while the straggler computes. Neither
coalescing a shard's waiting gradients nor one update per clock removes that sharing (both tried:
0.81-0.95). Without a straggler ps-ssp is never slower (float noise aside); with one, the bound
held is 0.9.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.heterogeneity import Heterogeneity, Straggler
from simcore.paramserver import Placement, PSConfig
from simcore.paramserver.report import PSResult
from simcore.paramserver.sweep import run_modes
from tests.paramserver_helpers import cluster, training, uniform_workload


def _pair(
    workers: int, bound: int, het: Heterogeneity, params: int, fwd_flops: float, layerwise: bool
) -> tuple[PSResult, PSResult]:
    results = run_modes(
        uniform_workload(8, params, fwd_flops, name=f"8x{params}x{fwd_flops:g}"),
        training(workers),
        cluster("g5.12xlarge", workers, Placement()),
        ["ps-sync", "ps-ssp"],
        PSConfig(staleness_bound=bound, layerwise=layerwise),
        cluster="g5.12xlarge",
        workers=workers,
        steps=6,
        heterogeneity=het,
    )
    return results["ps-sync"], results["ps-ssp"]


@settings(max_examples=12, deadline=None)
@given(
    workers=st.sampled_from([2, 4, 8]),
    bound=st.integers(0, 4),
    straggler=st.one_of(st.none(), st.tuples(st.integers(0, 7), st.sampled_from([1.5, 2.0, 3.0, 4.0]))),
    params=st.sampled_from([250_000, 1_000_000, 4_000_000]),
    fwd_flops=st.sampled_from([2e9, 2e10]),
    layerwise=st.booleans(),
)
def test_ssp_is_not_slower_than_sync(
    workers: int,
    bound: int,
    straggler: tuple[int, float] | None,
    params: int,
    fwd_flops: float,
    layerwise: bool,
) -> None:
    het = Heterogeneity((Straggler(straggler[0] % workers, straggler[1]),) if straggler else ())
    sync, ssp = _pair(workers, bound, het, params, fwd_flops, layerwise)
    floor = 0.9 if straggler else 1.0 - 1e-9
    assert ssp.throughput_samples_per_s >= floor * sync.throughput_samples_per_s
    # the table's figures are the same run's: samples/s = throughput, step = global batch / it
    for result in (sync, ssp):
        assert (
            abs(result.step.samples_per_s - result.throughput_samples_per_s)
            <= 1e-9 * result.step.samples_per_s
        )
        assert (
            abs(result.step.step_time_s * result.step.samples_per_s - result.step.global_batch) <= 1e-9 * 64
        )


def test_ssp_at_bound_zero_is_sync_and_behind_a_straggler_runs_ahead() -> None:
    het = Heterogeneity((Straggler(0, 3.0),))
    sync, ssp = _pair(4, 0, het, 1_000_000, 2e10, True)
    assert ssp.step.step_time_s == sync.step.step_time_s and ssp.staleness["max"] == 0
    sync, ssp = _pair(4, 2, het, 1_000_000, 2e10, True)
    assert ssp.throughput_samples_per_s > 1.1 * sync.throughput_samples_per_s
    assert max(ssp.ssp_blocking_s) > 0
