"""What a step plan's shape depends on: the strategy and configuration, not the GPU count.

A compiled plan template (one plan structure per workload, strategy, micro-batch and recompute,
re-valued per GPU count) rests on this: between GPU counts of the same node shape every
strategy's plan has the same operations on the same streams, with the same kinds, keys, labels,
dependencies and memory categories; only numbers change: collective costs, and also the shard
sizes and the optimizer step of sharded strategies, and (with the default rank spread: the slowest
of more GPUs gates the step) the compute times, so re-pricing the collectives alone is not enough.
"""

from __future__ import annotations

import pytest

from simcore.fastpath.costs import fast_collective_model
from simcore.step.plan import StepPlan
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import make_context
from simcore.workload.loader import load_workload
from topologies import load_cluster


def _shape(plan: StepPlan) -> list[tuple[object, ...]]:
    """Everything of a plan but its numbers."""
    return [
        (
            op.stream, op.kind, op.name, op.key, op.label, op.after, op.after_start,
            tuple(c for c, _ in op.on_start), tuple(c for c, _ in op.on_end), tuple(c for c, _ in op.after_end),
        )
        for op in plan.ops
    ]  # fmt: skip


@pytest.mark.parametrize("name", strategy_names())
def test_a_plan_has_one_shape_at_every_gpu_count_of_whole_nodes(name: str) -> None:
    workload = load_workload("gpt2-small", seq_len=256)
    shapes = []
    for gpus in (16, 32, 64):
        topology = load_cluster("dgx-a100", gpus=gpus)
        config = TrainingConfig(global_batch=gpus * 4, micro_batch=1, seq_len=256)
        ctx = make_context(workload, config, topology, collective=fast_collective_model(topology))
        plan = get_strategy(name).build_plan(ctx)
        shapes.append((_shape(plan), sorted(plan.initial_memory)))
    assert shapes[0] == shapes[1] == shapes[2]
