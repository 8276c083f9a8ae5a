"""DeepSpeed ZeRO-3's prefetch bound: ``stage3_max_live_parameters`` (simcore/strategies/deepspeed.py)."""

from __future__ import annotations

import pytest

from simcore.errors import TrainsimError
from simcore.step.plan import COMM
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.deepspeed import prefetch_allowed, released_after_recompute, zero3_defaults
from simcore.whatif.sweep import run_what_if
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer
from topologies import load_cluster


def _on_demand(name: str, max_live: int | None, accumulation: int = 1) -> tuple[int, int]:
    """(on-demand all-gathers, all all-gathers) of a plan on the toy transformer: an embedding of
    4M parameters, four blocks of three 2M layers, a 1M head; 3M prefetch buckets, so ZeRO-3's
    groups are the embedding (4M), six pairs of block layers (4M each) and the head (1M)."""
    config = TrainingConfig(
        global_batch=16 * accumulation, micro_batch=1, zero3_prefetch_bucket_params=3_000_000,
        zero3_max_live_params=max_live,
    )  # fmt: skip
    plan = get_strategy(name).build_plan(toy_context(16, config, workload=toy_transformer(blocks=4)))
    gathers = [op for op in plan.ops if op.stream == COMM and op.kind == "all_gather"]
    return sum("on demand" in op.name for op in gathers), len(gathers)


def test_deepspeed_defaults_are_its_config_defaults() -> None:
    """deepspeed/runtime/zero/config.py: 5e7, 1e9, 1e5; the config's bucket default is the same."""
    defaults = zero3_defaults()
    assert (defaults.prefetch_bucket_size, defaults.max_live_parameters) == (50_000_000, 1_000_000_000)
    assert defaults.param_persistence_threshold == 100_000
    assert TrainingConfig().zero3_prefetch_bucket_params == defaults.prefetch_bucket_size


def test_the_bound_is_the_coordinators_loop_condition() -> None:
    """min(max_live - available, bucket) > 0: something is prefetched only while room is left."""
    assert prefetch_allowed([4e6], 4e6 + 1)
    assert not prefetch_allowed([4e6], 4e6)
    assert not prefetch_allowed([3e6, 2e6], 4e6)
    assert prefetch_allowed([], 1)


def test_under_the_bound_only_the_first_group_of_each_pass_is_gathered_on_demand() -> None:
    """Default 1e9 elements against 4M groups: each pass prefetches the next group, so only the
    forward's first group (the embedding) and the backward's first (the head, resharded after
    forward) wait for their all-gather: 2 of 16."""
    assert _on_demand("zero3", None) == (2, 16)
    assert _on_demand("zero3", 4_000_001) == (2, 16)  # one element of room is enough


def test_at_the_bound_nothing_is_prefetched_while_a_full_group_is_gathered() -> None:
    """max_live 4M: with a 4M group gathered there is no room, so every forward group is gathered
    on demand (8); in backward the head (1M) leaves 3M of room and prefetches the last block pair,
    every other group waits (7): 15 of 16."""
    assert _on_demand("zero3", 4_000_000) == (15, 16)
    assert _on_demand("zero3", 1) == (16, 16)  # a bound under every group: nothing prefetched


def test_every_micro_batch_obeys_the_bound() -> None:
    assert _on_demand("zero3", 4_000_000, accumulation=3) == (45, 48)


def test_fsdp_keeps_its_own_prefetch() -> None:
    """The bound is DeepSpeed's: torch FSDP ignores it."""
    assert _on_demand("fsdp", 1) == _on_demand("fsdp", None)


def _record(
    max_live: int | None, path: str = "des", reuse: int | None = None, checkpoint: bool = False
) -> object:
    config = TrainingConfig(
        global_batch=32, micro_batch=2, zero3_prefetch_bucket_params=3_000_000, zero3_max_live_params=max_live,
        zero3_max_reuse_distance=reuse, activation_checkpointing=checkpoint,
    )  # fmt: skip
    workload = toy_transformer(blocks=20, layers_per_block=2)
    result = run_what_if(
        workload,
        ["dgx-a100"],
        [16],
        loader=load_cluster,
        strategies=["zero3"],
        config=config,
        engine_path=path,
    )
    assert result.engine_paths[("dgx-a100", 16)] == path
    report = result.reports[-1]
    assert report.gpus == 16
    return report


def test_without_prefetch_the_step_is_slower_and_the_peak_no_higher() -> None:
    free, bound = _record(None), _record(1)
    assert bound.step_time_s > free.step_time_s  # type: ignore[attr-defined]
    assert bound.exposed_comm_s > free.exposed_comm_s  # type: ignore[attr-defined]
    assert bound.peak_memory_bytes <= free.peak_memory_bytes  # type: ignore[attr-defined]


@pytest.mark.parametrize("max_live", [1, 4_000_000, None])
def test_the_event_free_path_agrees_with_the_des(max_live: int | None) -> None:
    des, fast = _record(max_live, "des"), _record(max_live, "fast")
    for name in ("step_time_s", "exposed_comm_s", "peak_memory_bytes"):
        assert getattr(fast, name) == pytest.approx(getattr(des, name), rel=0.01), name


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(TrainsimError, match="zero3_max_live_params"):
        TrainingConfig(zero3_max_live_params=0)


def test_the_note_says_when_a_group_reaches_the_bound() -> None:
    def note(max_live: int | None) -> str:
        config = TrainingConfig(
            global_batch=16,
            micro_batch=1,
            zero3_prefetch_bucket_params=3_000_000,
            zero3_max_live_params=max_live,
        )
        return get_strategy("zero3").assumption_note(
            toy_context(16, config, workload=toy_transformer(blocks=4))
        )

    assert note(None) == "" and note(4_000_001) == ""
    assert "a gather group of 4e+06 elements reaches stage3_max_live_parameters (4e+06)" in note(4_000_000)


def test_the_reuse_rule_walks_the_recompute_then_the_backward() -> None:
    """GPT 174.6B's four modules (QKV 4.5e8, out 1.5e8, FC1 6e8, FC2 6e8) with 1e9: after QKV's
    recompute the walk passes out, FC1 (7.5e8), FC2 (1.35e9) and stops: released; out: FC1, FC2
    (1.2e9): released; FC1: FC2, then FC2's backward (1.2e9): released; FC2: its own backward
    comes first: kept."""
    gpt175 = [(0, 4.5e8), (1, 1.5e8), (2, 6e8), (3, 6e8)]
    assert released_after_recompute(gpt175, 1e9) == [0, 1, 2]
    assert released_after_recompute(gpt175, 2e9) == [0, 1]  # QKV walks 2.55e9 to its backward
    assert released_after_recompute(gpt175, 4e9) == []  # every backward within 4e9 (QKV: 2.7e9)
    assert released_after_recompute(gpt175, 0) == [0, 1, 2, 3]  # nothing kept
    assert released_after_recompute([(0, 2e8)], 1e9) == []  # one group per block: used again at once


def _regathers(name: str, reuse: int | None, checkpoint: bool = True) -> int:
    """Second all-gathers on the toy transformer with 4e8-parameter layers (each its own group):
    four checkpointed blocks of three groups."""
    config = TrainingConfig(
        global_batch=16, micro_batch=1, zero3_prefetch_bucket_params=3_000_000,
        zero3_max_reuse_distance=reuse, activation_checkpointing=checkpoint,
    )  # fmt: skip
    workload = toy_transformer(blocks=4, params_per_layer=400_000_000)
    plan = get_strategy(name).build_plan(toy_context(16, config, workload=workload))
    return sum("again after recompute" in op.name for op in plan.ops if op.kind == "all_gather")


def test_checkpointed_blocks_gather_their_released_groups_again() -> None:
    """Three 4e8 groups a block, reuse 1e9: only the block's first group is released (the walk
    passes the other two and the last one's backward, 1.2e9), so one more all-gather a block: 4.
    Reuse 0 releases all three (12), a reuse beyond the block none; no recompute, or FSDP: none."""
    assert _regathers("zero3", None) == 4
    assert _regathers("zero3", 0) == 12
    assert _regathers("zero3", 10**12) == 0
    assert _regathers("zero3", 0, checkpoint=False) == 0
    assert _regathers("fsdp", 0) == 0


def test_regathering_costs_time_and_the_paths_agree() -> None:
    once, twice = _record(None, checkpoint=True), _record(None, reuse=0, checkpoint=True)
    assert twice.step_time_s >= once.step_time_s  # type: ignore[attr-defined]
    assert twice.comm_s > once.comm_s  # type: ignore[attr-defined]
    fast = _record(None, "fast", reuse=0, checkpoint=True)
    for name in ("step_time_s", "exposed_comm_s", "comm_s", "peak_memory_bytes"):
        assert getattr(fast, name) == pytest.approx(getattr(twice, name), rel=0.01), name
