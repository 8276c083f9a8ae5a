"""Check FSDP wrapping units against the model's blocks, and what a misaligned plan costs.

    python -m experiments.check_shards --model llama2-7b --gpus 16 --wrap every-3-layers

The lesson of the seed study, as its author reports it (M. S. I. Ovi, "Performance Characterization
of Distributed Deep Learning Strategies: A Quantitative Evaluation of DDP, FSDP, and Parameter
Server Architectures on GPU Clusters", arXiv 2505.12832, 2025): a shard boundary that splits a
transformer block costs an extra round trip (the unit that starts inside the block cannot be
prefetched, so its all-gather is exposed in forward and again in backward). This reports which
blocks the plan splits and simulates one FSDP step with the plan and with the aligned per-block plan
on the same cluster.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from experiments.check_shards.args import build_parser
from experiments.common.args import check_micro_steps
from experiments.common.finite import require_finite
from simcore.errors import TrainsimError, cli_entry
from simcore.strategies.base import TrainingConfig
from simcore.strategies.fsdp import FSDPStrategy
from simcore.strategies.runner import make_context, simulate_step
from simcore.strategies.wrap import UnitPlan, parse_wrap, wrap_units
from simcore.topology import Topology
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload
from topologies import load_cluster

LISTED = 6  # split blocks named in the table before "..."


def _describe(units: UnitPlan, block_names: tuple[str, ...]) -> list[str]:
    if not units.split_blocks:
        return ["aligned: every unit boundary falls on a block boundary"]
    split = list(units.split_blocks.items())
    named = ", ".join(f"{block_names[b]} (units {'+'.join(map(str, us))})" for b, us in split[:LISTED])
    more = f", ... ({len(split) - LISTED} more)" if len(split) > LISTED else ""
    starts = sorted(units.mid_block_forward | units.mid_block_backward)
    return [
        f"MISALIGNED: {len(split)} of {len(block_names)} blocks are split across units: {named}{more}",
        f"{len(starts)} units start or end inside a block and are gathered on demand (no prefetch)",
    ]


def _table(record: dict[str, Any], units: UnitPlan, workload: Workload) -> str:
    lines = [
        f"model {workload.name}: {record['blocks']} blocks, {len(workload.layers)} layers; "
        f"wrap {record['wrap']} -> {record['units']} units (unit 0 = root: layers outside blocks)",
        *_describe(units, workload.block_names),
        f"simulated FSDP step on {record['cluster']}, {record['gpus']} GPUs: this plan {record['step_time_s']:.4f} s "
        f"(exposed comm {record['exposed_comm_s']:.4f} s); aligned per-block plan "
        f"{record['aligned_step_time_s']:.4f} s (exposed comm {record['aligned_exposed_comm_s']:.4f} s)",
        f"cost of this plan: {record['extra_step_time_s']:+.4f} s per step "
        f"({record['extra_step_time_s'] / record['aligned_step_time_s'] * 100:+.1f}%)",
    ]
    return "\n".join(lines)


def _fsdp_step(workload: Workload, config: TrainingConfig, topology: Topology) -> tuple[float, float]:
    """(step time, exposed communication) of one simulated FSDP step."""

    ctx = make_context(workload, config, topology)
    step = simulate_step(FSDPStrategy(), ctx, slowdown=config.slowdown(None))
    return step.run.step_time_s, step.run.step_time_s - step.plan.compute_s()


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    wrap = parse_wrap(args.wrap)
    config = TrainingConfig(
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        prefetch=args.prefetch,
        wrap=wrap,
    )
    accumulation = config.accumulation_steps(args.gpus)
    check_micro_steps(2 * accumulation, f"two FSDP steps of {accumulation} micro-batches each", quiet=False)
    workload = load_workload(
        args.model, seq_len=args.seq_len, dtype=config.dtype, import_timeout_s=args.import_timeout
    )
    if not workload.block_names:
        raise TrainsimError(f"model {workload.name!r} has no blocks to align units with")
    units = wrap_units(workload, wrap)
    topology = load_cluster(args.cluster, gpus=args.gpus)
    (plan_s, plan_exposed), (aligned_s, aligned_exposed) = (
        _fsdp_step(workload, cfg, topology) for cfg in (config, replace(config, wrap="per-block"))
    )
    extra = plan_s - aligned_s
    record: dict[str, Any] = {
        "model": workload.name,
        "cluster": args.cluster,
        "gpus": args.gpus,
        "wrap": args.wrap,
        "blocks": len(workload.block_names),
        "units": len(units.units),
        "split_blocks": {workload.block_names[b]: list(us) for b, us in units.split_blocks.items()},
        "aligned": not units.split_blocks,
        "step_time_s": plan_s,
        "aligned_step_time_s": aligned_s,
        "extra_step_time_s": extra,
        "exposed_comm_s": plan_exposed,
        "aligned_exposed_comm_s": aligned_exposed,
    }
    require_finite(record, "the shard check")
    if args.format == "json":
        print(json.dumps(record, indent=2))
    else:
        print(_table(record, units, workload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
