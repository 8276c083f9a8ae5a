"""The what-if's layout flags (``--tp --pp --vpp --cp --ep --recompute --offload`` ...): parse them
and run the what-if (:func:`simcore.whatif.sweep.run_what_if`) over the layouts they list."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

from simcore.calibration.profile import CalibrationProfile
from simcore.compute.heterogeneity import Heterogeneity
from simcore.errors import TrainsimError
from simcore.parallel import ParallelOptions
from simcore.parallel.layout import ParallelLayout, parse_stage_layers
from simcore.progress import note
from simcore.strategies import strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.topology import ClusterLoader
from simcore.whatif.layouts import layouts_from_lists
from simcore.whatif.sweep import WhatIfResult, run_what_if
from simcore.workload.types import Workload
from topologies import load_cluster

__all__ = ["parallel_options", "run_layouts"]


def _degrees(text: str | None, flag: str) -> list[int]:
    if text is None:
        return [1]
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TrainsimError(f"--{flag}: expected a number or a comma list of numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise TrainsimError(f"--{flag}: expected positive numbers, got {text!r}")
    kept = list(dict.fromkeys(values))  # a layout listed twice is one layout, not two rows
    if len(kept) < len(values):
        repeated = sorted({v for v in values if values.count(v) > 1})
        note(f"--{flag} {text!r} repeats {', '.join(map(str, repeated))}; each is used once", quiet=False)
    return kept


def parallel_options(args: argparse.Namespace) -> ParallelOptions:
    """The run options the flags give (defaults: :class:`ParallelOptions`'s)."""
    given = {
        "schedule": args.schedule,
        "sequence_parallel": args.sequence_parallel,
        "tp_comm_overlap": args.tp_comm_overlap,
        "cp_kind": args.cp_kind,
        "ring_merge": getattr(args, "ring_merge", None),
        "ring_kv": getattr(args, "ring_kv", None),
        "recompute": args.recompute,
        "offload": args.offload,
        "expert_load": args.expert_load,
        "capacity_factor": args.capacity_factor,
    }
    return ParallelOptions(**{k: v for k, v in given.items() if v is not None})


def _uneven(text: str, layouts: list[ParallelLayout], workload: Workload) -> ParallelLayout:
    """The one layout of ``--pp-layers`` (one --pp and --vpp value; its block counts per stage)."""
    if len(layouts) != 1 or layouts[0].pp == 1:
        raise TrainsimError(
            "--pp-layers needs one --pp value above 1 (and one --tp, --cp, --ep, --vpp value)"
        )
    if workload.dims is None:
        raise TrainsimError(
            f"--pp-layers needs a transformer model; {workload.name!r} has no transformer shape"
        )
    layout = layouts[0]
    counts = parse_stage_layers(text, layout.pp, layout.vpp, workload.dims.layers)
    return replace(layout, stage_layers=counts)


def run_layouts(
    args: argparse.Namespace,
    workload: Workload,
    clusters: list[str],
    gpus: list[int],
    config: TrainingConfig,
    heterogeneity: Heterogeneity,
    calibration: CalibrationProfile | None,
    progress: Callable[[str], None] | None,
    *,
    loader: ClusterLoader = load_cluster,
) -> WhatIfResult:
    """The what-if over every layout the flags list (synchronous strategies only)."""
    if heterogeneity.describe() != "none":
        raise TrainsimError("--straggler and --jitter are not supported with parallel layouts")
    # The default list (none given): layouts apply to the synchronous strategies.
    chosen = list(args.strategies) if args.strategies is not None else strategy_names()
    layouts = layouts_from_lists(
        _degrees(args.tp, "tp"),
        _degrees(args.pp, "pp"),
        _degrees(args.cp, "cp"),
        _degrees(args.ep, "ep"),
        _degrees(args.vpp, "vpp"),
    )
    if args.pp_layers is not None:
        layouts = [_uneven(args.pp_layers, layouts, workload)]
    return run_what_if(
        workload,
        clusters,
        gpus,
        loader=loader,
        layouts=layouts,
        options=parallel_options(args),
        strategies=chosen,
        config=config,
        calibration=calibration,
        seed=args.seed,
        progress=progress,
    )
