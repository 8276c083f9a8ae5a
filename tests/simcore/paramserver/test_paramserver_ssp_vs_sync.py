"""ps-ssp against ps-sync on the same run (a property over stragglers and bounds).

SSP relaxes the barrier: a worker may run up to s clocks ahead of the slowest instead of 0, and a
worker the gate will hold pulls once it may go on (not at once and again after waiting); at s = 0
it is the barrier itself and runs as ps-sync (Ho et al. 2013). What it still pays that the barrier
does not: its shards apply every gradient as its own update (W a round to ps-sync's one), which
shows where the shard's update is on the critical path (small compute, big shards). An earlier
probe of 40 random cases found worst 0.99 of ps-sync's rate with s >= 1 (before that: 0.85 behind a
2x straggler at s = 1, 0.83 at s = 0); the full grid below finds the case it missed.

Not "never slower" behind a straggler when the server's links are the bottleneck, and the theory
says why. SSP with bound s never waits more than the barrier for the same update order (Ho et al.
2013) only where waiting is all there is: on a link shared fairly (TCP, ps-lite's one connection
per worker and server) the order of the bytes matters too. Real SSP systems do not throttle pushes:
a Petuum / Bosen client sends its clock's updates at the end of every clock and blocks only in its
next read (the model here does the same: a fast worker at the bound has pushed, and waits to
pull). A full grid of the space below (288 cases: 4 and 8 workers, s in {1, 2, 4}, no straggler
or 2x/3x/4x on ranks 0, 1, 7, three sizes, two compute loads, layer-wise or not) gives:

- no straggler: worst 1.008 of ps-sync's rate (never slower);
- with a straggler: worst 0.848 (8 workers, s = 2 or 4, a 3x straggler on rank 7, 8 x 4 M
  parameters, 2e10 FLOPs, layer-wise pushes). There the gate never closes, so ps-ssp is ps-async
  event for event (:func:`simcore.paramserver.sweep.run_modes` reuses that run): SSP's rule
  cannot be the cause. It is ps-async against ps-sync on a saturated server NIC: the straggler
  sits on the node of the second shard, and unsynchronised pushes and pulls share that NIC's
  directions fairly with its traffic, where the barrier's phases leave the links to one kind at
  a time (busiest link 87% used under ps-sync, 84% under ps-async). With s = 1 the gate closes and
  ps-ssp is 0.856, a little better than ps-async. Coalescing a shard's waiting gradients or one
  update per clock does not remove that sharing (both tried before: 0.81-0.95).
- the sustained-rate window (:func:`simcore.paramserver.report.sustained_samples_per_s`) is exact
  to one round of gradients only, and behind a straggler the two modes' first steps differ
  (ps-sync's ends with the straggler's first gradient, the asynchronous modes' with the W-th
  gradient, fast workers' second ones included): a case at 0.943 of ps-sync's rate (8 workers,
  s = 1, a 4x straggler) applied its budget sooner than ps-sync did (0.19585 s against 0.19697 s).

So the property held with a straggler is the grid's worst with a margin, 0.84, and the worst case
is always among the examples; a change of the physics that moves it fails here.

Since each segment's part is applied and pulled as it arrives (MXNet's per-key rounds, issue 21)
that worst case runs at 1.18 of ps-sync's rate; on a 504-case grid (4 and 8 workers, s in {1, 2,
4}, no straggler or 2-4x on ranks 0, 1, 7, the three sizes and loads, layer-wise or not, ps-lite's
server) the worst is 1.011 without a straggler and 0.913 with one. Two workers are another matter:
with the shard 60-90% busy its W updates a round are on the critical path where before they hid
behind the whole-shard exchange (2 workers, s = 1, 4 M parameters, 2e9 FLOPs, layer-wise: ps-ssp
0.894 of ps-sync, ps-async 0.935, the shard 93% busy against 64%; behind a 2x straggler 0.806).
So the rule is now the throughput property's (test_paramserver_throughput.py): never slower than
ps-sync plus the extra shard updates, and behind a straggler that or the floor (margin 1.11 over a
648-case grid of 2, 4 and 8 workers with stragglers).
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from simcore.compute.heterogeneity import Heterogeneity, Straggler
from simcore.paramserver import Placement, PSConfig
from simcore.paramserver.report import PSResult
from simcore.paramserver.sweep import run_modes
from tests.paramserver_helpers import cluster, training, uniform_workload

# ps-ssp over ps-sync behind a straggler on saturated server links (module docstring: grid worst 0.848)
SSP_FLOOR_BEHIND_A_STRAGGLER = 0.84


def _pair(
    workers: int, bound: int, het: Heterogeneity, params: int, fwd_flops: float, layerwise: bool
) -> tuple[PSResult, PSResult]:
    results = run_modes(
        uniform_workload(8, params, fwd_flops, name=f"8x{params}x{fwd_flops:g}"),
        training(workers),
        cluster("g5.12xlarge", workers, Placement()),
        ["ps-sync", "ps-ssp"],
        PSConfig(staleness_bound=bound, layerwise=layerwise, serial_server=False),  # ps-lite's server
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
@example(workers=8, bound=2, straggler=(7, 3.0), params=4_000_000, fwd_flops=2e10, layerwise=True)
@example(workers=2, bound=1, straggler=None, params=4_000_000, fwd_flops=2e9, layerwise=True)  # 0.894 x sync
@example(workers=2, bound=1, straggler=(0, 2.0), params=4_000_000, fwd_flops=2e9, layerwise=True)  # 0.806 x
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
    # never slower than ps-sync plus its extra shard updates (as in test_paramserver_throughput.py);
    # behind a straggler, or at most 1 / floor slower (saturated server links, module docstring)
    per_sample_sync, per_sample_ssp = (1.0 / r.throughput_samples_per_s for r in (sync, ssp))
    extra = max(0.0, ssp.server_busy * per_sample_ssp - sync.server_busy * per_sample_sync)
    bound = (per_sample_sync + extra) * 1.02
    if straggler:
        bound = max(bound, per_sample_sync / SSP_FLOOR_BEHIND_A_STRAGGLER)
    assert per_sample_ssp <= bound
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
