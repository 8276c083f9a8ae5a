"""Parameter servers in the discrete-event simulation: sharded servers, per-rank workers, staleness.

Public API::

    run_parameter_server(workload, cluster, workers, ps, training, *, heterogeneity=..., calibration=None,
                         seed=0) -> PSResult
    simulate_parameter_server(workload, training, topology, ps, *, workers=None, heterogeneity=...,
                              calibration=None, seed=0) -> PSOutcome
    summarise(outcome, *, cluster) -> PSResult
    PSConfig(mode, shards, placement, staleness_bound, steps); Placement; parse_placement(text)
    PS_MODES = ("ps-sync", "ps-async", "ps-ssp", "ps-mitigated")

    run_modes(workload, training, topology, modes, options, *, cluster, workers, steps, ...) -> dict[str, PSResult]
    PSOptions(shards, placement, staleness_bound)   # the what-if's flags

Modules: ``config`` (settings), ``layout`` (sharding and server placement), ``server`` (a shard),
``worker`` (worker processes), ``modes`` (what each mode adds), ``state`` (the live run),
``footprint`` (worker memory), ``simulate`` (one run), ``report`` (PSResult), ``sweep`` (several
modes on one point), ``advice`` (the uneven-hardware branch of the recommendation).
"""

from simcore.paramserver.config import (
    DEFAULT_PS_STEPS,
    DEFAULT_STALENESS_BOUND,
    PLACEMENTS,
    PS_MODES,
    Placement,
    PSConfig,
    PSOptions,
    normalize_mode,
    parse_placement,
)
from simcore.paramserver.layout import ShardLayout, load_ps_cluster, shard_layers
from simcore.paramserver.report import PSResult, summarise
from simcore.paramserver.simulate import PSOutcome, run_parameter_server, simulate_parameter_server
from simcore.paramserver.sweep import run_modes

__all__ = [
    "DEFAULT_PS_STEPS",
    "DEFAULT_STALENESS_BOUND",
    "PLACEMENTS",
    "PS_MODES",
    "PSConfig",
    "PSOptions",
    "PSOutcome",
    "PSResult",
    "Placement",
    "ShardLayout",
    "load_ps_cluster",
    "normalize_mode",
    "parse_placement",
    "run_modes",
    "run_parameter_server",
    "shard_layers",
    "simulate_parameter_server",
    "summarise",
]
