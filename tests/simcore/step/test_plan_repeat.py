"""A micro-batch built once and repeated (:meth:`PlanBuilder.repeat`): the plan building gives.

The sharded strategies (FSDP, ZeRO-3, HSDP) and ZeRO-2 build a middle micro-batch with their hooks
and repeat it for the next ones with the same hook settings. Repeating is exact by construction (the same code on the same state),
so the tests hold the plans with repetition to the plans built micro-batch by micro-batch, field
for field, over strategies, GPU counts, accumulation and every setting that changes the hooks.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simcore.step.plan import PlanBuilder, RepeatSpan, StepPlan
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer


def _two_micro_batches() -> tuple[PlanBuilder, RepeatSpan]:
    """A plan of two opening operations and one micro-batch (2), after the second, of a forward, a
    gather it prefetches and a backward waiting for it."""
    builder = PlanBuilder("toy")
    builder.compute("setup", 1.0)
    opening = builder.compute("opening", 1.0)
    start = len(builder.plan.ops)
    key = builder.key(micro_batch=2, block=0)
    fwd = builder.compute(builder.label("forward of block0"), 2.0, key=key, kind="fwd", after=[opening])
    gather = builder.comm(
        builder.label("all_gather ", "unit"), 0.5, kind="all_gather", size_bytes=8.0,
        key=builder.key(group=3, micro_batch=2), after_start=[fwd], on_start=[("buffers", 8.0)],
    )  # fmt: skip
    bwd = builder.compute(builder.label("backward of block0"), 4.0, key=key, kind="bwd", after=[gather])
    return builder, RepeatSpan(start, len(builder.plan.ops), opening, bwd, 2)


def test_a_repeated_micro_batch_is_shifted_renumbered_and_follows_the_last_one() -> None:
    builder, span = _two_micro_batches()
    again = builder.repeat(span, span.last)
    assert again == RepeatSpan(5, 8, 4, 7, 3)
    fwd, gather, bwd = builder.plan.ops[5:]
    assert (fwd.id, fwd.after, fwd.name, fwd.key.micro_batch) == (
        5,
        (4,),
        "forward of block0 [micro-batch 3]",
        3,
    )
    assert (gather.after_start, gather.name, gather.key.group) == (
        (5,),
        "all_gather unit 3 [micro-batch 3]",
        3,
    )
    assert (bwd.after, bwd.duration_s, gather.on_start, gather.bytes) == ((6,), 4.0, (("buffers", 8.0),), 8.0)
    assert builder.last_comm == 6
    ops = builder.plan.ops
    assert ops[2:5] == [
        replace(ops[i], id=i - 3, key=ops[i - 3].key, name=ops[i - 3].name, after=ops[i - 3].after,
                after_start=ops[i - 3].after_start)
        for i in range(5, 8)
    ]  # nothing else changed  # fmt: skip


def test_a_span_that_is_not_self_contained_is_not_repeated() -> None:
    builder, span = _two_micro_batches()
    # the forward now waits for an operation before the span that it did not follow
    builder.plan.ops[2] = replace(builder.plan.ops[2], after=(0,))
    assert builder.repeat(span, span.last) is None
    assert len(builder.plan.ops) == 5
    unlabelled, plain = _two_micro_batches()
    unlabelled.compute("a name of its own", 1.0)
    assert unlabelled.repeat(RepeatSpan(plain.start, plain.end + 1, 1, plain.last, 2), 5) is None


def _plan(
    name: str, gpus: int, config: TrainingConfig, repeat: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[StepPlan, int]:
    """The strategy's plan, with repetition or without, and how many micro-batches were repeated."""
    repeated = []
    original = PlanBuilder.repeat

    def counted(self: PlanBuilder, span: RepeatSpan, previous: int | None) -> RepeatSpan | None:
        got = original(self, span, previous) if repeat else None
        repeated.extend([got] if got is not None else [])
        return got

    with monkeypatch.context() as patch:
        patch.setattr(PlanBuilder, "repeat", counted)
        workload = toy_transformer(blocks=6, layers_per_block=2)
        return get_strategy(name).build_plan(toy_context(gpus, config, workload=workload)), len(repeated)


@pytest.mark.parametrize("name", ["fsdp", "zero3", "hsdp", "zero2"])
@pytest.mark.parametrize("gpus", [1, 8, 16])
@pytest.mark.parametrize("accumulation", [1, 3, 5])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"activation_checkpointing": True},
        {"gradient_sync_every_micro_batch": False},
        {"zero3_per_rank_lists": True, "activation_checkpointing": True, "zero3_max_reuse_distance": 1},
        {"prefetch": 2, "reshard_after_forward": False},
    ],
)
def test_repeated_micro_batches_are_the_plan_built_one_by_one(
    name: str, gpus: int, accumulation: int, settings: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TrainingConfig(
        global_batch=gpus * 2 * accumulation, micro_batch=2, precision="mixed",
        zero3_prefetch_bucket_params=3_000_000, **settings,  # type: ignore[arg-type]
    )  # fmt: skip
    if name == "hsdp" and gpus % 8:
        return
    built, _ = _plan(name, gpus, config, False, monkeypatch)
    repeated, count = _plan(name, gpus, config, True, monkeypatch)
    if gpus > 1 and accumulation == 5:
        assert count >= 2  # micro-batches 3 and 4 (and 5 where the last has the middle's settings)
    assert repeated.ops == built.ops
    assert (repeated.initial_memory, repeated.fragmentation) == (built.initial_memory, built.fragmentation)
