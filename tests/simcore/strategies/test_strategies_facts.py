"""What each strategy says about itself, and the operation keys its plans carry."""

from __future__ import annotations

from collections import Counter

import pytest

from simcore.compute.memory import model_state_bytes
from simcore.errors import TrainsimError
from simcore.step.plan import COMM, render_label
from simcore.strategies import STRATEGIES, get_strategy
from simcore.strategies.base import SHARD_SCOPES, TrainingConfig, framework_of, optimizer_state_bytes
from simcore.strategies.runner import report_step, simulate_step
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer

# What each strategy is, from its framework's documentation: DDP shards nothing; DeepSpeed's ZeRO
# stages 1-3 shard optimizer state, + gradients, + parameters over every rank (Rajbhandari et al.
# 2020); FSDP is stage 3 over every rank, HSDP over one node. DDP (no_sync) and ZeRO-1 communicate
# only after the last micro-batch; ZeRO-2 reduces, ZeRO-3/FSDP/HSDP gather and reduce, in every one.
FACTS = {
    "ddp": (0, "world", False, "torch-ddp"),
    "zero1": (1, "world", False, "deepspeed"),
    "zero2": (2, "world", True, "deepspeed"),
    "zero3": (3, "world", True, "deepspeed"),
    "fsdp": (3, "world", True, "torch-fsdp"),
    "hsdp": (3, "node", True, "torch-fsdp"),
}


def test_each_strategy_states_what_it_shards_where_and_when_it_communicates() -> None:
    """The facts the planner's memory floor, the pipeline composer and the precision rules read."""
    assert set(STRATEGIES) == set(FACTS)
    for name, strategy in STRATEGIES.items():
        stated = (strategy.zero_stage, strategy.shard_scope, strategy.communicates_every_microbatch)
        assert (*stated, strategy.framework) == FACTS[name], name
        assert strategy.shard_scope in SHARD_SCOPES, name


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_zero_stage_and_scope_are_what_the_plan_holds_between_steps(name: str) -> None:
    """Parameters and optimizer state at the step's start: the ZeRO paper's sharding of the stage,
    over the world or one node (16 ranks, 8 per node)."""
    strategy = get_strategy(name)
    ctx = toy_context(16)
    plan = strategy.build_plan(ctx)
    precision = ctx.precision(strategy)
    ranks = {"world": 16, "node": 8}[strategy.shard_scope]
    want = model_state_bytes(
        strategy.zero_stage, ctx.workload.params, ranks, precision.bytes("param"), precision.bytes("grad"),
        optimizer_state_bytes(precision, ctx.config.optimizer),
    )  # fmt: skip
    assert plan.initial_memory["params"] == pytest.approx(want["params"])
    assert plan.initial_memory["optimizer"] == pytest.approx(want["optimizer"])


def test_the_framework_picks_auto_precision_and_the_optimizer() -> None:
    ctx = toy_context(16, TrainingConfig(global_batch=32, micro_batch=2))  # precision auto, bf16
    modes = {name: ctx.precision(strategy).mode for name, strategy in STRATEGIES.items()}
    assert modes == {
        "ddp": "amp", "fsdp": "fsdp-mp", "zero1": "mixed", "zero2": "mixed", "zero3": "mixed", "hsdp": "fsdp-mp",
    }  # fmt: skip
    impls = {name: ctx.optimizer_impl(strategy) for name, strategy in STRATEGIES.items()}
    assert impls == {"ddp": "foreach", "fsdp": "foreach", "hsdp": "foreach"} | dict.fromkeys(
        ("zero1", "zero2", "zero3"), "fused"
    )  # DeepSpeed builds FusedAdam on GPUs
    assert framework_of("ps-async") == "torch-ps"
    assert ctx.precision("ps-sync").mode == "amp"
    with pytest.raises(TrainsimError, match="pass the strategy itself"):
        ctx.precision("fsdp")  # a name alone would not say who runs it


def test_only_zero2_notes_that_it_runs_zero1s_step() -> None:
    one = toy_context(16, TrainingConfig(global_batch=32, micro_batch=2))  # one micro-batch, one bucket
    two = toy_context(16, TrainingConfig(global_batch=64, micro_batch=2))
    notes = {name: strategy.assumption_note(one) for name, strategy in STRATEGIES.items()}
    assert notes["zero2"].startswith("zero2 runs the same step as zero1 here")
    assert not any(note for name, note in notes.items() if name != "zero2")
    assert get_strategy("zero2").assumption_note(two) == ""
    result = simulate_step(get_strategy("zero2"), one, path="fast")
    assert report_step(result, one, cluster="c", device="d", peak_flops=1e14).note == notes["zero2"]


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("accumulation", [1, 3])
def test_labels_are_rendered_from_the_keys(name: str, accumulation: int) -> None:
    ctx = toy_context(16, TrainingConfig(global_batch=16 * accumulation, micro_batch=1, precision="mixed"))
    plan = get_strategy(name).build_plan(ctx)
    labelled = [(op, op.label) for op in plan.ops if op.label is not None]
    assert labelled and all(op.name == render_label(label, op.key) for op, label in labelled)
    numbered = {op.key.micro_batch for op in plan.ops if op.key.micro_batch is not None}
    # Micro-batches built one operation at a time are numbered, when there are several: every one
    # where each communicates; ZeRO-1's last (the others run as one no-sync operation); DDP's none
    # (its last is labelled as the step's).
    several = accumulation > 1
    every = set(range(1, accumulation + 1)) if several else set()
    want = {"ddp": set(), "zero1": {accumulation} if several else set()}.get(name, every)
    assert numbered == want
    assert all(f"[micro-batch {op.key.micro_batch}]" in op.name for op in plan.ops if op.key.micro_batch)


@pytest.mark.parametrize(("name", "units"), [("fsdp", 5), ("hsdp", 5), ("zero3", 8)])
def test_each_unit_is_reduced_once_per_micro_batch_its_key_names(name: str, units: int) -> None:
    """Four blocks of three 2M-parameter layers: FSDP wraps each block, plus the root (embedding
    and head): 5 units; ZeRO-3's 3M-parameter prefetch buckets close once full: the 4M embedding
    alone, then two block layers each (6), then the 1M head: 8."""
    config = TrainingConfig(global_batch=16 * 3, micro_batch=1, zero3_prefetch_bucket_params=3_000_000)
    plan = get_strategy(name).build_plan(toy_context(16, config, workload=toy_transformer(blocks=4)))
    reduced = Counter(
        (op.key.micro_batch, op.key.group)
        for op in plan.ops
        if op.stream == COMM and op.kind == "reduce_scatter"
    )
    groups = {group for _, group in reduced}
    assert len(groups) == units and set(reduced.values()) == {1}
    assert set(reduced) == {(m, g) for m in (1, 2, 3) for g in groups}
