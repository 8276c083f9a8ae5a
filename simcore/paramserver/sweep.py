"""Several parameter-server modes on one (cluster, GPU count) point, sharing what can be shared.

ps-ssp is ps-async plus a gate that blocks a worker more than s clocks ahead of the slowest. The
gate is checked at the instant a gradient's computation starts, which is also when its clock lag
is recorded; so if ps-async never ran a worker more than s clocks ahead, SSP's gate would never
have closed and the two runs are the same event for event (the gate draws no random numbers and
yields nothing while open, and a worker's pulls wait for the slowest only when the gate would
close). Then ps-ssp's result is ps-async's, relabelled, and one simulation is saved.

ps-ssp with s = 0 is bulk-synchronous ("SSP with s = 0 is BSP", Ho et al., NIPS 2013): no worker may
start a gradient before every other has applied its last one, so the server may as well sum the
round's W gradients and apply one update, as ps-sync does. It runs as ps-sync, relabelled (a
per-gradient server would apply W updates a round for the same schedule and come out up to 17%
slower than the barrier it is equal to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity
from simcore.paramserver.config import PSConfig, normalize_mode
from simcore.paramserver.report import PSResult, summarise
from simcore.paramserver.simulate import plan_parameter_server, simulate_parameter_server

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.strategies.base import TrainingConfig
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = ["as_ssp", "run_modes"]


def as_ssp(result: PSResult, bound: int) -> PSResult:
    """A ps-async (or, for s = 0, ps-sync) result relabelled as the identical ps-ssp run."""
    return replace(result, mode="ps-ssp", staleness_bound=bound, step=replace(result.step, strategy="ps-ssp"))


def run_modes(
    workload: Workload,
    training: TrainingConfig,
    topology: Topology,
    modes: Sequence[str],
    options: PSConfig,
    *,
    cluster: str,
    workers: int,
    steps: int,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
) -> dict[str, PSResult]:
    """Each of ``modes`` on ``topology`` (built for ``options.placement``), by mode name.

    Every run takes ``options`` with its own mode and ``steps`` (the options' own mode and steps
    are not used)."""
    wanted = [normalize_mode(m) for m in modes]
    # async and sync before ssp, which may be either's run relabelled
    order = sorted(dict.fromkeys(wanted), key=lambda m: m == "ps-ssp")
    results: dict[str, PSResult] = {}
    # shards, server times, compute and segments: the same for every mode of the point
    plan = plan_parameter_server(
        workload, training, topology, options, workers=workers, calibration=calibration
    )
    for mode in order:
        run_as = "ps-sync" if mode == "ps-ssp" and options.staleness_bound == 0 else mode
        previous = results.get("ps-async")
        if run_as == "ps-sync" and "ps-sync" in results:
            results[mode] = as_ssp(results["ps-sync"], 0)
            continue
        if run_as == "ps-ssp" and previous is not None and previous.clock_lag_max <= options.staleness_bound:
            results[mode] = as_ssp(previous, options.staleness_bound)
            continue
        outcome = simulate_parameter_server(
            workload,
            training,
            topology,
            replace(options, mode=run_as, steps=steps),
            workers=workers,
            heterogeneity=heterogeneity,
            calibration=calibration,
            seed=seed,
            plan=plan,
        )
        result = summarise(outcome, cluster=cluster)
        results[mode] = as_ssp(result, 0) if run_as != mode else result
    return {mode: results[mode] for mode in wanted}
