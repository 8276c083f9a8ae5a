"""Parameter servers in the discrete-event simulation: sharded servers, per-rank workers, staleness.

Public API::

    run_parameter_server(workload, cluster, workers, ps, training, *, loader, heterogeneity=...,
                         calibration=None, seed=0) -> PSResult
    simulate_parameter_server(workload, training, topology, ps, *, workers=None, heterogeneity=...,
                              calibration=None, seed=0) -> PSOutcome
    summarise(outcome, *, cluster) -> PSResult
    load_ps_cluster(cluster, workers, placement, *, loader) -> Topology
    PSConfig(mode, shards, placement, staleness_bound, steps); Placement; parse_placement(text)
    MODES (the mode table), PS_MODES / normalize_mode (ps- names), PLAIN_PS_MODES / normalize_ps_mode
    run_modes(workload, training, topology, modes, options, *, cluster, workers, steps, ...) -> dict[str, PSResult]

``loader`` is a :class:`simcore.topology.ClusterLoader` (``topologies.load_cluster``).

Modules: ``config`` (modes and settings), ``layout`` (sharding and server placement), ``server``
(a shard), ``worker`` (worker processes), ``modes`` (what each mode adds), ``state`` (the live
run), ``footprint`` (worker memory), ``simulate`` (one run), ``report`` (PSResult), ``run`` (one
run on a named cluster), ``sweep`` (several modes on one point), ``advice`` (the uneven-hardware
branch of the recommendation).
"""

from simcore.paramserver.config import (
    DEFAULT_PS_STEPS,
    DEFAULT_STALENESS_BOUND,
    MODES,
    PLACEMENTS,
    PLAIN_PS_MODES,
    PS_MODES,
    Placement,
    PSConfig,
    normalize_mode,
    normalize_ps_mode,
    parse_placement,
)
from simcore.paramserver.layout import ShardLayout, load_ps_cluster, shard_layers
from simcore.paramserver.report import PSResult, summarise
from simcore.paramserver.run import run_parameter_server
from simcore.paramserver.simulate import PSOutcome, simulate_parameter_server
from simcore.paramserver.sweep import run_modes

__all__ = [
    "DEFAULT_PS_STEPS",
    "DEFAULT_STALENESS_BOUND",
    "MODES",
    "PLACEMENTS",
    "PLAIN_PS_MODES",
    "PS_MODES",
    "PSConfig",
    "PSOutcome",
    "PSResult",
    "Placement",
    "ShardLayout",
    "load_ps_cluster",
    "normalize_mode",
    "normalize_ps_mode",
    "parse_placement",
    "run_modes",
    "run_parameter_server",
    "shard_layers",
    "simulate_parameter_server",
    "summarise",
]
