"""Throughput of the parameter-server modes: what the protocols imply about their relative speed.

Asynchrony removes the barrier, so ps-async is never slower than ps-sync; ps-mitigated is ps-async
plus a version check and recomputes, so it is never faster where nothing is shared to relieve
(compute-bound work); a straggler costs ps-sync its whole delay and ps-async at most its own share.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from simcore.compute.heterogeneity import Heterogeneity, Straggler
from simcore.paramserver import Placement, PSConfig, simulate_parameter_server, summarise
from tests.paramserver_helpers import run, training, uniform_workload

PLACEMENTS = (Placement(), Placement("dedicated", 1), Placement("dedicated", 2))
COMPUTE_BOUND = uniform_workload(params=250_000, fwd_flops=2e10, name="compute-bound")


@settings(max_examples=10, deadline=None)
@example(
    workers=2,
    steps=4,
    params=4_000_000,
    fwd_flops=2e8,
    layers=3,
    shards=3,
    placement=Placement(kind="colocated", server_nodes=1),
    straggler=None,
)
@example(  # async 7% slower than sync: its extra shard updates are on the critical path
    workers=2,
    steps=4,
    params=1_000_000,
    fwd_flops=2e8,
    layers=3,
    shards=3,
    placement=Placement(),
    straggler=None,
)
@given(
    workers=st.integers(1, 8),
    steps=st.integers(4, 6),
    params=st.sampled_from([250_000, 1_000_000, 4_000_000]),
    fwd_flops=st.sampled_from([2e8, 2e9, 2e10]),
    layers=st.sampled_from([1, 3, 8]),
    shards=st.sampled_from([None, 1, 2, 3]),
    placement=st.sampled_from(PLACEMENTS),
    straggler=st.one_of(st.none(), st.tuples(st.integers(0, 7), st.floats(1.0, 4.0))),
)
def test_async_is_slower_than_sync_by_at_most_its_extra_shard_work(
    workers: int,
    steps: int,
    params: int,
    fwd_flops: float,
    layers: int,
    shards: int | None,
    placement: Placement,
    straggler: tuple[int, float] | None,
) -> None:
    stragglers = (Straggler(straggler[0] % workers, straggler[1]),) if straggler else ()
    workload = uniform_workload(layers, params, fwd_flops, name=f"{layers}x{params}x{fwd_flops:g}")
    sync, asynchronous = (
        run(
            mode,
            workers=workers,
            steps=steps,
            shards=shards,
            placement=placement,
            workload=workload,
            heterogeneity=Heterogeneity(stragglers),
        )
        for mode in ("ps-sync", "ps-async")
    )
    # Asynchrony removes the barrier's waiting and adds only one thing: a shard applies every push as
    # a full optimizer update (W updates a round) where ps-sync sums W gradients and applies one. So
    # per sample async takes no longer than sync plus the extra serialized shard work, the busiest
    # shard's busy seconds per sample in async minus those in sync. Where that work is hidden,
    # async is never slower; where it is on the critical path it can be (2 workers, 2-3 colocated
    # shards of 1-4 M parameters: up to 7% slower, the busiest shard 45% busy against 33%). The bound
    # held on all 2,592 cases of a grid over these axes (worst ratio 0.9998). It is on the sustained
    # rate, not the p50 of individual steps: async's first steps run before the links are contended,
    # so with few steps its median can sit above sync's while its run still ends first.
    per_sample_sync = 1.0 / sync.throughput_samples_per_s
    per_sample_async = 1.0 / asynchronous.throughput_samples_per_s
    extra_shard_work = max(
        0.0, asynchronous.server_busy * per_sample_async - sync.server_busy * per_sample_sync
    )
    # The rates are the steady state (after each run's first step) while server_busy is over the
    # whole run: 2% for the window (the bound's worst case on a grid of these axes was 0.8% over).
    assert per_sample_async <= (per_sample_sync + extra_shard_work) * 1.02


@settings(max_examples=10, deadline=None)
@given(
    workers=st.integers(2, 8),
    steps=st.integers(2, 6),
    bound=st.integers(0, 6),
    params=st.sampled_from([1_000, 10_000]),
    fwd_flops=st.sampled_from([2e9, 2e10]),
    shards=st.sampled_from([None, 1, 2, 3]),
    placement=st.sampled_from(PLACEMENTS[:2]),
)
def test_mitigated_is_never_faster_than_async_when_compute_bound(
    workers: int,
    steps: int,
    bound: int,
    params: int,
    fwd_flops: float,
    shards: int | None,
    placement: Placement,
) -> None:
    """Equal workers, no jitter, links and shards nearly idle: the check and recomputes only add time.

    Bandwidth-bound runs are left out on purpose: there the check can break the lockstep of
    identical async workers and let pushes overlap pulls (see simcore.paramserver.modes). So is the
    p50 step: over a few steps the mitigated run's gradients can land in a more even rhythm (its
    first step, with the recomputes, is the slow one) while fewer of them land per second.
    """
    workload = uniform_workload(3, params, fwd_flops, name=f"3x{params}x{fwd_flops:g}")
    asynchronous, mitigated = (
        run(
            mode,
            workers=workers,
            steps=steps,
            shards=shards,
            placement=placement,
            bound=bound,
            workload=workload,
        )
        for mode in ("ps-async", "ps-mitigated")
    )
    assert mitigated.throughput_samples_per_s <= asynchronous.throughput_samples_per_s * (1 + 1e-9)


def test_mitigated_is_slower_than_async_on_a_short_mixed_run() -> None:
    """The reproduce_paper oddity in small: 4 A10G + 8 A100 workers, 4 steps.

    When a run ended with a drain (no gradient started after ``steps * W``, the run over when the
    last one landed), ps-mitigated looked faster: the A10G workers held ps-async's last gradients.
    A run that ends with every worker at work ranks the protocols by their cost.
    """
    from topologies import mixed_cluster

    topology = mixed_cluster([("g5.12xlarge", 1), ("dgx-a100", 1)])
    results = {}
    for mode in ("ps-async", "ps-mitigated"):
        outcome = simulate_parameter_server(
            COMPUTE_BOUND, training(12), topology, PSConfig(mode=mode, steps=4, staleness_bound=3), workers=12
        )
        results[mode] = summarise(outcome, cluster="mixed")
    mitigated, asynchronous = results["ps-mitigated"], results["ps-async"]
    assert mitigated.recomputes > 0 and mitigated.gradients_applied == asynchronous.gradients_applied == 48
    assert mitigated.throughput_samples_per_s < 0.9 * asynchronous.throughput_samples_per_s


@settings(max_examples=8, deadline=None)
@given(rank=st.integers(0, 7), factor=st.floats(2.0, 4.0))
def test_a_straggler_costs_sync_its_delay_and_async_at_most_its_share(rank: int, factor: float) -> None:
    steps = 6
    base_sync, base_async = (run(m, workload=COMPUTE_BOUND, steps=steps) for m in ("ps-sync", "ps-async"))
    het = Heterogeneity((Straggler(rank, factor),))
    slow_sync, slow_async = (
        run(m, workload=COMPUTE_BOUND, steps=steps, heterogeneity=het) for m in ("ps-sync", "ps-async")
    )
    delay = (factor - 1.0) * base_sync.step.compute_s
    # The barrier waits for the straggler's gradient: the step grows by its extra compute, less at
    # most the contention its late push no longer meets (the base step's exposed communication).
    assert slow_sync.step.step_time_s - base_sync.step.step_time_s >= delay - base_sync.step.exposed_comm_s
    # Without a barrier the other 7 workers keep their pace: the run loses at most the straggler's
    # share, 1/8, and one more round of the others for the last gradients (steps / (steps + 1)).
    workers = base_async.step.gpus
    share = (workers - 1) / workers * steps / (steps + 1)
    assert slow_async.throughput_samples_per_s >= share * base_async.throughput_samples_per_s
    sync_loss = 1 - slow_sync.throughput_samples_per_s / base_sync.throughput_samples_per_s
    async_loss = 1 - slow_async.throughput_samples_per_s / base_async.throughput_samples_per_s
    assert async_loss < sync_loss / 2


def test_one_worker_async_is_sync_without_the_sum() -> None:
    """One worker: both modes push, update and pull each shard in turn; sync also sums (one gradient)."""
    workload = uniform_workload(3, 4_000_000, 2e8, name="uneven-shards")  # 2 shards: 8M and 4M parameters
    sync, asynchronous = (
        run(mode, workers=1, steps=4, shards=2, placement=Placement("dedicated", 1), workload=workload)
        for mode in ("ps-sync", "ps-async")
    )
    assert asynchronous.step.step_time_s <= sync.step.step_time_s
    assert asynchronous.step.step_time_s >= 0.9 * sync.step.step_time_s
