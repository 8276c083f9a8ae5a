"""Sharing runs between modes, and the uneven-hardware branch of the advice."""

from __future__ import annotations

from dataclasses import replace

from simcore.compute.heterogeneity import Heterogeneity, Straggler
from simcore.paramserver import Placement, PSConfig
from simcore.paramserver.advice import uneven_hardware_advice
from simcore.paramserver.sweep import run_modes
from tests.paramserver_helpers import cluster, run, training, uniform_workload

WORKLOAD = uniform_workload(params=250_000, fwd_flops=2e10)


def test_ssp_reuses_async_only_when_the_gate_would_never_have_closed() -> None:
    topo = cluster("g5.12xlarge", 8, Placement())
    options = PSConfig(staleness_bound=2)
    shared = run_modes(
        WORKLOAD,
        training(8),
        topo,
        ["ps-ssp", "ps-async"],
        options,
        cluster="g5.12xlarge",
        workers=8,
        steps=4,
    )
    assert list(shared) == ["ps-ssp", "ps-async"]
    assert shared["ps-async"].clock_lag_max <= 2
    simulated = run("ps-ssp", workload=WORKLOAD, steps=4, bound=2)
    assert shared["ps-ssp"].to_record() == simulated.to_record()  # the relabelled run is the real one
    slow = Heterogeneity((Straggler(3, 4.0),))
    gated = run_modes(
        WORKLOAD,
        training(8),
        topo,
        ["ps-async", "ps-ssp"],
        PSConfig(staleness_bound=1),
        cluster="g5.12xlarge",
        workers=8,
        steps=4,
        heterogeneity=slow,
    )
    assert max(gated["ps-ssp"].ssp_blocking_s) > 0  # simulated, not copied


def test_ssp_at_bound_zero_is_the_sync_run_relabelled() -> None:
    """SSP with s = 0 is BSP (Ho et al. 2013): the same schedule, one update a round."""
    topo = cluster("g5.12xlarge", 8, Placement())
    slow = Heterogeneity((Straggler(3, 4.0),))
    both = run_modes(
        WORKLOAD, training(8), topo, ["ps-ssp", "ps-sync"], PSConfig(staleness_bound=0),
        cluster="g5.12xlarge", workers=8, steps=4, heterogeneity=slow,
    )  # fmt: skip
    ssp, sync = both["ps-ssp"], both["ps-sync"]
    assert ssp.mode == ssp.step.strategy == "ps-ssp" and ssp.staleness_bound == 0
    assert replace(ssp, mode="ps-sync", step=replace(ssp.step, strategy="ps-sync")) == sync


def test_advice_prefers_the_parameter_server_only_when_the_numbers_say_so() -> None:
    slow = Heterogeneity((Straggler(3, 4.0),))
    ps = {"ps-async": run("ps-async", workload=WORKLOAD, steps=4, heterogeneity=slow)}
    sync = replace(run("ps-sync", workload=WORKLOAD, steps=4, heterogeneity=slow).step, strategy="ddp")
    reports = [sync, ps["ps-async"].step]
    rates = {"ddp": sync.samples_per_s, "ps-async": ps["ps-async"].throughput_samples_per_s}
    verdict = uneven_hardware_advice(reports, ps, rates, "rank 3 x4")
    assert verdict is not None and verdict.ps_wins and verdict.strategy == "ps-async"
    assert "rank 3 x4" in verdict.reason and "staleness mean" in verdict.reason
    losing = uneven_hardware_advice(reports, ps, {**rates, "ddp": 10 * rates["ps-async"]}, "rank 3 x4")
    assert losing is not None and not losing.ps_wins and losing.strategy == "ddp"
    assert "slower than ddp" in losing.reason
    assert uneven_hardware_advice([sync], {}, rates, "x") is None
