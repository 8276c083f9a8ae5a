"""One parameter-server configuration on a cluster named by the caller: load, simulate, summarise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity
from simcore.paramserver.config import PSConfig
from simcore.paramserver.layout import load_ps_cluster
from simcore.paramserver.report import PSResult, summarise
from simcore.paramserver.simulate import simulate_parameter_server

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.strategies.base import TrainingConfig
    from simcore.topology import ClusterLoader
    from simcore.workload.types import Workload

__all__ = ["run_parameter_server"]


def run_parameter_server(
    workload: Workload,
    cluster: str,
    workers: int,
    ps: PSConfig,
    training: TrainingConfig,
    *,
    loader: ClusterLoader,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
) -> PSResult:
    """Load ``cluster`` with ``loader`` for ``workers`` workers (plus server nodes if dedicated),
    simulate, summarise."""
    topology = load_ps_cluster(cluster, workers, ps.placement, loader=loader)
    outcome = simulate_parameter_server(
        workload,
        training,
        topology,
        ps,
        workers=workers,
        heterogeneity=heterogeneity,
        calibration=calibration,
        seed=seed,
    )
    return summarise(outcome, cluster=cluster)
