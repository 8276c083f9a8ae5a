"""Uneven pipeline stages (``--pp-layers``): the three forms of the list, each stage built from its
own block count (its parameters and time), the bubble set by the slowest stage, the label, and
one clear line for every list that cannot be run."""

from __future__ import annotations

import math

import pytest

from simcore.parallel import ParallelLayout, simulate_parallel_step
from simcore.parallel.layout import LayoutError, check_layout, parse_stage_layers
from simcore.parallel.pp import partition_stages
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt


def test_a_comma_list_is_taken_as_written() -> None:
    assert parse_stage_layers("15,16,16,15", 4, 1, 62) == (15, 16, 16, 15)


def test_megatron_first_and_last_split_the_rest_evenly() -> None:
    # 32 blocks, pp 4: 3 on the first, 5 on the last, (32 - 8) / 2 = 12 on each middle stage.
    assert parse_stage_layers("first:3,last:5", 4, 1, 32) == (3, 12, 12, 5)
    # Only the first given: the other 8 stages share 126 - 14 = 112, 14 each.
    assert parse_stage_layers("first:14", 9, 1, 126) == (14,) + (14,) * 8
    assert parse_stage_layers("last:2", 2, 1, 8) == (6, 2)


def test_torchtitan_counts_embedding_and_head_as_one_block_each() -> None:
    # Llama 3.1 405B over 8 stages: (126 + 1 + 1) / 8 = 16 effective each; first and last 15.
    assert parse_stage_layers("torchtitan", 8, 1, 126) == (15, 16, 16, 16, 16, 16, 16, 15)
    # 32 + 2 = 34 over 4: 9, 9, 8, 8 effective -> 8, 9, 8, 7 blocks.
    assert parse_stage_layers("torchtitan", 4, 1, 32) == (8, 9, 8, 7)
    # Weights 2 and 3: 32 + 5 = 37 over 4: 10, 9, 9, 9 -> 8, 9, 9, 6.
    assert parse_stage_layers("torchtitan:2:3", 4, 1, 32) == (8, 9, 9, 6)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("7,9,9,8", "sums to 33 blocks; the model has 32"),
        ("8,8,16", "lists 3 stages"),
        ("first:3,last:4", "do not split evenly over the 2 middle"),
        ("first:0", "F, L >= 1"),
        ("first:3,first:4", "each at most once"),
        ("eight", "expected block counts per stage"),
        ("torchtitan:1", "torchtitan:I:O"),
    ],
)
def test_a_list_that_cannot_be_run_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(LayoutError) as err:
        counts = parse_stage_layers(text, 4, 1, 32)
        ParallelLayout(pp=4, stage_layers=counts)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_stage_without_blocks_is_refused() -> None:
    with pytest.raises(LayoutError, match="at least one block"):
        ParallelLayout(pp=2, stage_layers=(8, 0))
    with pytest.raises(LayoutError, match="leaves a stage without blocks"):
        parse_stage_layers("torchtitan:3:3", 4, 1, 4)


def test_check_layout_wants_the_model_s_block_count() -> None:
    workload = small_gpt()  # 8 blocks
    with pytest.raises(LayoutError, match="sums to 9 blocks; the model has 8"):
        check_layout(ParallelLayout(pp=2, stage_layers=(4, 5)), 8, workload)
    check_layout(ParallelLayout(pp=2, stage_layers=(3, 5)), 8, workload)


def test_the_label_shows_the_split() -> None:
    assert ParallelLayout(tp=2, pp=4, stage_layers=(7, 9, 9, 7)).label(16) == "dp2 tp2 pp4[7,9,9,7]"
    assert ParallelLayout(pp=2, vpp=2, stage_layers=(1, 3, 3, 1)).label(2) == "dp1 pp2[1,3,3,1] vpp2"


def test_partition_puts_embedding_first_and_head_last_around_the_counts() -> None:
    workload = small_gpt(tied=False)
    stages = partition_stages(workload, 2, (3, 5))
    blocks = [sorted({workload.layers[i].block for i in s} - {-1}) for s in stages]
    assert blocks == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert workload.layers[stages[0][0]].kind == "embedding"
    assert {"lm_head", "loss"} <= {workload.layers[i].name for i in stages[1]}
    assert sorted(i for s in stages for i in s) == list(range(len(workload.layers)))


def test_each_stage_holds_the_parameters_of_its_own_blocks() -> None:
    workload = small_gpt(tied=False)
    config = TrainingConfig(global_batch=8, micro_batch=1)
    result = simulate_parallel_step(
        workload, config, cluster("dgx-a100", 2), "ddp", ParallelLayout(pp=2, stage_layers=(3, 5))
    )
    per_block = sum(layer.params for layer in workload.layers if layer.block == 0)
    outside = [layer for layer in workload.layers if layer.block == -1]
    embed = sum(layer.params for layer in outside if layer.kind == "embedding")
    rest = sum(layer.params for layer in outside) - embed
    held = [s.memory_breakdown["params"] / config.param_bytes for s in result.stages]
    assert held == pytest.approx([embed + 3 * per_block, 5 * per_block + rest], rel=1e-12)


def test_the_slowest_stage_sets_the_step() -> None:
    """With one micro-batch per stage and no overlap, 1F1B's step is the sum of the stages' passes;
    a lopsided split is slower than the even one, and the fast path gives the discrete-event step."""
    workload = small_gpt(tied=False)
    config = TrainingConfig(global_batch=8, micro_batch=1)
    topology = cluster("dgx-a100", 2)
    times = {}
    for counts in [(4, 4), (2, 6), (6, 2)]:
        layout = ParallelLayout(pp=2, stage_layers=counts)
        fast = compose_parallel_step(workload, config, topology, "ddp", layout, path="fast").report
        des = compose_parallel_step(workload, config, topology, "ddp", layout, path="des").report
        assert math.isclose(fast.step_time_s, des.step_time_s, rel_tol=1e-9)
        times[counts] = fast.step_time_s
        assert fast.layout.endswith(f"pp2[{counts[0]},{counts[1]}]")
    assert times[(2, 6)] > times[(4, 4)] and times[(6, 2)] > times[(4, 4)]
    even = compose_parallel_step(workload, config, topology, "ddp", ParallelLayout(pp=2)).report
    assert times[(4, 4)] == pytest.approx(even.step_time_s, rel=1e-12)


def test_the_interleaved_schedule_takes_uneven_virtual_stages() -> None:
    """pp 2 x vpp 2 over 8 blocks without an even cut: the discrete-event and event-free steps agree,
    and the rank holding 3 + 3 blocks of a (3, 1, 3, 1) split sets a slower step than the even cut."""
    workload = small_gpt(tied=False)
    config = TrainingConfig(global_batch=8, micro_batch=1)
    topology = cluster("dgx-a100", 2)
    times = {}
    for counts in [(2, 2, 2, 2), (1, 3, 3, 1), (3, 1, 3, 1)]:
        layout = ParallelLayout(pp=2, vpp=2, stage_layers=counts)
        fast = compose_parallel_step(workload, config, topology, "ddp", layout, path="fast").report
        des = compose_parallel_step(workload, config, topology, "ddp", layout, path="des").report
        assert math.isclose(fast.step_time_s, des.step_time_s, rel_tol=0.01)
        times[counts] = des.step_time_s
    # (1, 3, 3, 1) leaves each rank 4 blocks (the embedding and head on the light chunks): as fast
    # as the even cut within 2%; (3, 1, 3, 1) gives rank 0 six blocks
    assert times[(1, 3, 3, 1)] == pytest.approx(times[(2, 2, 2, 2)], rel=0.02)
    assert times[(3, 1, 3, 1)] > 1.1 * max(times[(1, 3, 3, 1)], times[(2, 2, 2, 2)])
    # the heavier rank computes 6 of 8 blocks against 4 of 8: its share of the step grows toward 6/4
    assert times[(3, 1, 3, 1)] / times[(2, 2, 2, 2)] < 1.5
