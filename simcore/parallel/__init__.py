"""Parallel layouts beyond data parallelism: tensor (+ sequence), pipeline, context and expert
parallelism composed with the data-parallel strategies, plus recompute and offload.

Public API::

    ParallelLayout(tp, pp, cp, ep, vpp, stage_layers)  the degrees; dp = gpus / (tp * pp * cp);
                                               stage_layers: uneven pipeline stages (blocks each)
    ParallelOptions(schedule, sequence_parallel, cp_kind, recompute, offload, expert_load,
                    capacity_factor, tp_comm_overlap)  how the layout runs
    check_layout(layout, gpus, workload)       one LayoutError naming the rule broken
    Placement(layout, gpus)                    process groups (Megatron's tp-cp-ep-dp-pp order)
    simulate_parallel_step(workload, config, topology, strategy, layout, options, *,
                           calibration, cluster, seed, path, cache) -> ParallelStepResult
    ComposeCache()                             what a sweep's configurations share (simcore.parallel.cache)
    ParallelStepReport                         StepReport + layout fields (simcore.parallel.report)
    partition_stages, rank_orders, run_pipeline   pipeline stages and schedules (simcore.parallel.pp)
    activation_bytes_per_layer                 Korthikanti et al. 2022's formulas (simcore.parallel.memory)
"""

from simcore.parallel.cache import ComposeCache
from simcore.parallel.layout import LayoutError, ParallelLayout, Placement, check_layout
from simcore.parallel.options import CP_KINDS, OFFLOAD_MODES, RECOMPUTE_MODES, ParallelOptions
from simcore.parallel.pp import PIPELINE_SCHEDULES
from simcore.parallel.report import ParallelStepReport
from simcore.parallel.step import ParallelStepResult, simulate_parallel_step

__all__ = [
    "CP_KINDS",
    "OFFLOAD_MODES",
    "PIPELINE_SCHEDULES",
    "RECOMPUTE_MODES",
    "ComposeCache",
    "LayoutError",
    "ParallelLayout",
    "ParallelOptions",
    "ParallelStepReport",
    "ParallelStepResult",
    "Placement",
    "check_layout",
    "simulate_parallel_step",
]
