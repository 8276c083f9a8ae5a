"""DeepSpeed 2021's per-rank list collectives (``zero3_per_rank_lists``, simcore/strategies/deepspeed.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.host_syncs import launch_latency_s
from simcore.step.plan import COMM, COMPUTE
from simcore.strategies import get_strategy
from simcore.strategies.base import StepContext, TrainingConfig
from simcore.strategies.deepspeed import (
    gathered_tensor_count,
    ipg_flushes,
    list_era_copies,
    per_rank_list_host_s,
    persistent_gather_host_s,
    persistent_sizes,
    tensor_sizes,
    zero3_defaults,
)
from simcore.strategies.runner import simulate_step
from simcore.whatif.sweep import run_what_if
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer
from tests.simcore.strategies.test_strategies_support import RateTimer, toy_context, toy_transformer
from topologies import load_cluster


def _context(gpus: int, lists: bool, checkpoint: bool = False) -> StepContext:
    config = TrainingConfig(
        global_batch=gpus, micro_batch=1, zero3_prefetch_bucket_params=3_000_000, precision="mixed",
        zero3_per_rank_lists=lists, activation_checkpointing=checkpoint,
    )  # fmt: skip
    return toy_context(gpus, config, workload=toy_transformer(blocks=4))


def _unprefetched(gpus: int) -> StepContext:
    """The toy with every gather on demand (prefetch 0)."""
    config = TrainingConfig(
        global_batch=gpus, micro_batch=1, zero3_prefetch_bucket_params=3_000_000, precision="mixed",
        zero3_per_rank_lists=True, prefetch=0,
    )  # fmt: skip
    return toy_context(gpus, config, workload=toy_transformer(blocks=4))


def test_the_per_rank_figures_are_the_data_files() -> None:
    """Our loop measurement (2.8 us, 4.4 us per rank) and one copy launched per rank by
    ProcessGroupNCCL (efficiency.yaml deepspeed_zero3.per_rank_lists)."""
    lists = zero3_defaults().per_rank_lists
    assert (lists["all_gather"].loop_s, lists["all_gather"].launches) == (2.8e-6, 1)
    assert (lists["reduce_scatter"].loop_s, lists["reduce_scatter"].launches) == (4.4e-6, 1)
    assert (lists["persistent_gather"].loop_s, lists["persistent_gather"].launches) == (7.7e-6, 1)


def test_the_host_cost_is_tensors_times_ranks_times_the_per_rank_work() -> None:
    """1,536 ranks, 4 tensors, 5 us per launch: 4 x 1536 x 7.8 us and 4 x 1536 x 9.4 us."""
    assert per_rank_list_host_s("all_gather", 1536, 4, 5e-6) == pytest.approx(4 * 1536 * 7.8e-6)
    assert per_rank_list_host_s("reduce_scatter", 1536, 4, 5e-6) == pytest.approx(4 * 1536 * 9.4e-6)
    assert per_rank_list_host_s("all_gather", 1, 4, 5e-6) == 0.0
    assert per_rank_list_host_s("reduce_scatter", 8, 0, 5e-6) == 0.0


@given(st.integers(2, 4096), st.integers(1, 200))
def test_the_host_cost_grows_linearly_with_the_ranks(ranks: int, tensors: int) -> None:
    one = per_rank_list_host_s("all_gather", ranks, tensors, 5e-6)
    assert per_rank_list_host_s("all_gather", 2 * ranks, tensors, 5e-6) == pytest.approx(2 * one)


def test_a_gpt_block_gathers_its_four_weights_and_reduces_all_twelve_tensors() -> None:
    """GPT 174.6B's block (hidden 12288): the QKV/out/FC1/FC2 weights are gathered; their biases
    (36864, 12288, 49152, 12288) and the two LayerNorms' 12288-element tensors persist (<= 1e5)."""
    h = 12288
    linear = [(3 * h, h), (h, h), (4 * h, h), (h, 4 * h)]  # (out, in)
    block = [Layer("norm1", "layernorm", 0, 2 * h, 0.0, 0.0, 0.0, 0.0, 0.0)]
    for out, inp in linear:
        block.append(
            Layer("fc", "linear", 0, out * inp + out, 1.0, 2.0, 0.0, 0.0, 0.0, gemm=(2048.0, inp, out))
        )
    block.append(Layer("norm2", "layernorm", 0, 2 * h, 0.0, 0.0, 0.0, 0.0, 0.0))
    assert tensor_sizes(block[1], 2) == [3 * h * h, 3 * h]
    assert tensor_sizes(block[0], 2) == [h, h]
    assert gathered_tensor_count(((layer, 2) for layer in block), 1e5) == 4
    assert gathered_tensor_count(((layer, 2) for layer in block), 0) == 12


def test_the_plan_holds_the_hand_counted_host_work() -> None:
    """Toy transformer, 16 ranks, 3M buckets: 8 groups holding 27 tensors (embedding 1, twelve 2M
    linears of 2 x 1M tensors, the head's 2 x 0.5M), all gathered (> 1e5); each group gathered in
    forward and again in backward (ZeRO-3 reshards everything) and reduce-scattered once:
    host = 16 x (2 x 27 x (2.8 + 5 us) + 27 x (4.4 + 5 us)). The all-gathers' lists are built on
    the compute stream (the device synchronized and idle), the reduce-scatters' on the
    communication queue beside the gradients' compute (built in the gradient hooks)."""
    plan = get_strategy("zero3").build_plan(_context(16, lists=True))
    host = [op for op in plan.ops if op.kind == "host"]
    launch = launch_latency_s()
    expected = 16 * (2 * 27 * (2.8e-6 + launch) + 27 * (4.4e-6 + launch))
    assert sum(op.duration_s for op in host) == pytest.approx(expected)
    gather_lists = [op for op in host if op.stream == COMPUTE]
    reduce_lists = [op for op in host if op.stream == COMM]
    assert (len(gather_lists), len(reduce_lists)) == (16, 8)  # one per all-gather / reduce-scatter
    assert sum(op.duration_s for op in reduce_lists) == pytest.approx(16 * 27 * (4.4e-6 + launch))
    gathers = [op for op in plan.ops if op.stream == COMM and op.kind == "all_gather"]
    assert len(gathers) == 16


def test_off_by_default_and_never_for_fsdp() -> None:
    assert not TrainingConfig().zero3_per_rank_lists
    for name, lists in (("zero3", False), ("fsdp", True)):
        plan = get_strategy(name).build_plan(_context(16, lists=lists))
        assert not [op for op in plan.ops if op.kind == "host"], name


def test_the_lists_cost_more_at_more_ranks() -> None:
    def host_s(gpus: int) -> float:
        plan = get_strategy("zero3").build_plan(_context(gpus, lists=True))
        return sum(op.duration_s for op in plan.ops if op.kind == "host")

    assert host_s(32) == pytest.approx(2 * host_s(16))


@pytest.mark.parametrize("checkpoint", [False, True])
def test_the_event_free_path_agrees_with_the_des(checkpoint: bool) -> None:
    def report(path: str, lists: bool) -> object:
        config = TrainingConfig(
            global_batch=32, micro_batch=2, zero3_prefetch_bucket_params=3_000_000,
            zero3_per_rank_lists=lists, activation_checkpointing=checkpoint,
        )  # fmt: skip
        result = run_what_if(
            toy_transformer(blocks=20, layers_per_block=2), ["dgx-a100"], [16], loader=load_cluster,
            strategies=["zero3"], config=config, engine_path=path,
        )  # fmt: skip
        return result.reports[-1]

    des, fast = report("des", True), report("fast", True)
    for name in ("step_time_s", "exposed_comm_s", "peak_memory_bytes"):
        assert getattr(fast, name) == pytest.approx(getattr(des, name), rel=0.01), name
    assert des.step_time_s > report("des", False).step_time_s  # type: ignore[attr-defined]


def test_a_fetch_waits_for_the_reduce_scatters_in_flight() -> None:
    """DeepSpeed 2021 synchronizes the device at each fetch: every reduce-scatter but the last is
    waited for by a later backward compute; today's DeepSpeed lets them run beside compute."""

    def waited(lists: bool) -> tuple[int, int]:
        plan = get_strategy("zero3").build_plan(_context(16, lists=lists))
        scatters = {op.id for op in plan.ops if op.kind == "reduce_scatter"}
        computes = [op for op in plan.ops if op.stream == COMPUTE and op.kind != "optimizer"]
        waits = {dep for op in computes for dep in op.after if dep in scatters}
        return len(waits), len(scatters)

    assert waited(True) == (7, 8)
    assert waited(False) == (0, 8)


def test_the_note_names_the_lists() -> None:
    note = get_strategy("zero3").assumption_note(_context(16, lists=True))
    assert "per-rank lists" in note and "builds 16 entries" in note
    assert "per-rank lists" not in get_strategy("zero3").assumption_note(_context(16, lists=False))


def test_the_2021_passes_are_a_fill_and_a_division() -> None:
    """efficiency.yaml deepspeed_zero3.list_era_passes: torch.zeros writes the gather buffer once
    (half a copy), div_ reads and writes the gradient once (one copy); nothing on one rank."""
    assert (zero3_defaults().zero_fill, zero3_defaults().gradient_divide) == (0.5, 1.0)
    assert list_era_copies("all_gather", 16) == 0.5
    assert list_era_copies("reduce_scatter", 16) == 1.0
    assert list_era_copies("all_gather", 1) == list_era_copies("reduce_scatter", 1) == 0.0


def test_each_collective_carries_its_fill_or_division_by_hand() -> None:
    """16 ranks at 1.5 TB/s (read + write): an all-gather of B bytes (fp16 parameters, mixed) gains
    B / 1.5e12 (a fill: B written once), a reduce-scatter of B bytes gains 2 B / 1.5e12 (div_:
    read and written), over the same plan without the lists; host work aside, nothing else moves."""

    def collectives(lists: bool) -> list[tuple[str, float, float]]:
        ctx = _context(16, lists=lists)
        ctx.timer = RateTimer(memory_bandwidth_Bps=1.5e12)
        plan = get_strategy("zero3").build_plan(ctx)
        return [
            (op.kind, op.bytes, op.duration_s) for op in plan.ops if op.stream == COMM and op.kind != "host"
        ]

    with_lists, without = collectives(True), collectives(False)
    assert [(k, b) for k, b, _ in with_lists] == [(k, b) for k, b, _ in without]
    # the toy's 27M gradient elements all fit the 5e8-element bucket: only the end of backward
    # flushes it, dividing the whole fp16 bucket (1e9 B, read and written) on the last reduce-scatter
    last = max(i for i, (kind, _, _) in enumerate(with_lists) if kind == "reduce_scatter")
    for i, ((kind, size, lists_s), (_, _, plain_s)) in enumerate(zip(with_lists, without, strict=True)):
        per_copy = {"all_gather": 1.0, "reduce_scatter": 2.0}[kind]
        bucket = 2 * 5e8 * 2 / 1.5e12 if i == last else 0.0
        assert lists_s - plain_s == pytest.approx(per_copy * size / 1.5e12 + bucket), kind
    assert {kind for kind, _, _ in with_lists} == {"all_gather", "reduce_scatter"}


def test_the_gradient_bucket_is_deepspeeds_default() -> None:
    """efficiency.yaml deepspeed_zero3.reduce_bucket_size: constants.py's 500,000,000 elements."""
    assert zero3_defaults().reduce_bucket_size == 500_000_000


def test_the_bucket_flushes_by_hand() -> None:
    """Bucket of 10: [4, 4] fills 8; 4 would make 12 (flush, 4 in); 15 would make 19 (flush, set
    aside, counted in); 1 would make 16 (flush); the end of backward flushes the 1: [0, 2, 2]. A
    first gradient larger than the bucket finds it empty: no flush until the next one."""
    assert ipg_flushes([[4, 4], [4, 15], [1]], 10) == [0, 2, 2]
    assert ipg_flushes([[15, 1]], 10) == [2]
    assert ipg_flushes([[5, 5]], 10) == [1]  # exactly full: no overflow, only the final flush
    assert ipg_flushes([], 10) == []


def test_a_gpt_175b_block_flushes_the_bucket_five_times() -> None:
    """GPT 174.6B's block in backward, biases first (h = 12288, bucket 5e8): after the previous
    block's QKV weight (453M) the FC2 bias fits; the FC2 weight (604M) flushes; the FC1 bias flushes
    (604M set aside); the FC1 weight flushes; norm2 flushes (604M set aside); the out-projection
    (151M) fits; the QKV weight (453M) flushes: five per block, one more at the end."""
    h = 12288
    block = [h, 4 * h * h, 4 * h, 4 * h * h, h, h, h, h * h, 3 * h, 3 * h * h, h, h]
    assert ipg_flushes([block] * 3, 5e8) == [5, 5, 6]


@given(st.lists(st.lists(st.integers(1, 50), max_size=6), max_size=6), st.integers(10, 60))
def test_every_flush_but_the_last_empties_a_bucket_that_would_overflow(
    groups: list[list[int]], bucket: int
) -> None:
    """Flushes are at least the elements over the bucket (each flush takes at most a bucket's worth
    or one gradient), at most one per gradient, and the last flush leaves nothing behind."""
    total = sum(map(sum, groups))
    flushes = sum(ipg_flushes(groups, bucket))
    assert flushes <= sum(map(len, groups))
    assert (flushes > 0) == (total > 0)
    assert flushes * max(bucket, max((max(g) for g in groups if g), default=0)) >= total


def test_the_persistent_gather_loop_by_hand() -> None:
    """1,536 ranks, 5 us per launch: a 12288-element tensor has parts of 8, all 1,536 ranks copy;
    a 49152-element one parts of 32, all copy: 2 x 1536 x (7.7 + 5) us. 20480 elements on 2,240
    ranks: parts of ceil(9.14) = 10, so only 2,048 ranks hold elements: 2240 x 7.7 + 2048 x 5 us."""
    assert persistent_gather_host_s([12288, 49152], 1536, 5e-6) == pytest.approx(2 * 1536 * 12.7e-6)
    assert persistent_gather_host_s([20480], 2240, 5e-6) == pytest.approx(2240 * 7.7e-6 + 2048 * 5e-6)
    assert persistent_gather_host_s([12288], 1, 5e-6) == 0.0
    assert persistent_gather_host_s([], 64, 5e-6) == 0.0


def test_a_gpt_block_keeps_eight_tensors_persistent() -> None:
    """The block of the test above: two LayerNorms' weight and bias and the four biases."""
    h = 12288
    block = [Layer("norm1", "layernorm", 0, 2 * h, 0.0, 0.0, 0.0, 0.0, 0.0)]
    for out, inp in [(3 * h, h), (h, h), (4 * h, h), (h, 4 * h)]:
        block.append(
            Layer("fc", "linear", 0, out * inp + out, 1.0, 2.0, 0.0, 0.0, 0.0, gemm=(2048.0, inp, out))
        )
    block.append(Layer("norm2", "layernorm", 0, 2 * h, 0.0, 0.0, 0.0, 0.0, 0.0))
    sizes = persistent_sizes(((layer, 2) for layer in block), 1e5)
    assert sorted(sizes) == sorted([h, h, 3 * h, h, 4 * h, h, h, h])


def test_the_step_ends_with_the_persistent_gather_by_hand() -> None:
    """GPT-2 small on 16 ranks: 12 blocks x 8 persistent tensors + the final LayerNorm's 2 = 98,
    each of 768, 2304 or 3072 elements (all divisible by 16: every rank copies), so the host loop
    after the optimizer step is 98 x 16 x (7.7 us + one launch); FSDP and today's DeepSpeed have
    none."""

    def plan(lists: bool, name: str = "zero3") -> object:
        config = TrainingConfig(global_batch=16, micro_batch=1, precision="mixed", zero3_per_rank_lists=lists)
        ctx = toy_context(16, config, workload=load_workload("gpt2-small", seq_len=128))
        return get_strategy(name).build_plan(ctx)

    ops = plan(True).ops  # type: ignore[attr-defined]
    loop = [op for op in ops if op.kind == "host" and "persistent" in op.name]
    assert len(loop) == 1 and loop[0] is ops[-1]
    assert loop[0].duration_s == pytest.approx(98 * 16 * (7.7e-6 + launch_latency_s()))
    gather = [op for op in ops if op.kind == "all_gather" and "persistent" in op.name]
    optimizer = [op for op in ops if op.kind == "optimizer"]
    assert len(gather) == 1 and gather[0].after == (optimizer[0].id,) and loop[0].after == (gather[0].id,)
    for lists, name in ((False, "zero3"), (True, "fsdp")):
        assert not [op for op in plan(lists, name).ops if "persistent" in op.name]  # type: ignore[attr-defined]


def test_the_gathers_again_after_recompute_carry_the_fill_too() -> None:
    """Checkpointed blocks, reuse distance 0: every group is released after its recompute and
    gathered again for its backward, through the same _allgather_param (its torch.zeros): each
    all-gather, the second ones included, gains B / 1.5e12 over the plan without the lists."""

    def gathers(lists: bool) -> list[tuple[str, float, float]]:
        config = TrainingConfig(
            global_batch=16, micro_batch=1, zero3_prefetch_bucket_params=3_000_000, precision="mixed",
            zero3_per_rank_lists=lists, activation_checkpointing=True, zero3_max_reuse_distance=0,
        )  # fmt: skip
        ctx = toy_context(16, config, workload=toy_transformer(blocks=4))
        ctx.timer = RateTimer(memory_bandwidth_Bps=1.5e12)
        plan = get_strategy("zero3").build_plan(ctx)
        return [(op.name, op.bytes, op.duration_s) for op in plan.ops if op.kind == "all_gather"]

    with_lists, without = gathers(True), gathers(False)
    assert any("again after recompute" in name for name, _, _ in with_lists)
    for (name, size, lists_s), (_, _, plain_s) in zip(with_lists, without, strict=True):
        assert lists_s - plain_s == pytest.approx(size / 1.5e12), name


def test_the_reduce_scatter_lists_are_built_beside_the_gradients_compute() -> None:
    """stage3.py (v0.3.13-v0.5.x) builds a reduce-scatter's per-rank lists in the gradient hook,
    which autograd runs once it has queued the kernels that make the gradient, and its reduction
    stream never waits for the compute stream: each unit's lists start with the backward compute
    that completes the unit (after_start), on the communication queue, and its reduce-scatter
    follows them."""
    plan = get_strategy("zero3").build_plan(_context(16, lists=True))
    ops = plan.ops
    reduce_lists = [op for op in ops if op.kind == "host" and op.stream == COMM]
    scatters = [op for op in ops if op.kind == "reduce_scatter"]
    assert len(reduce_lists) == len(scatters) == 8
    for lists, scatter in zip(reduce_lists, scatters, strict=True):
        (started_with,) = lists.after_start
        assert lists.after == ()
        assert ops[started_with].stream == COMPUTE and ops[started_with].name.startswith("backward")
        assert lists.key.group == scatter.key.group
        assert scatter.after == (lists.id,)


def test_the_lists_start_when_the_gradients_compute_starts() -> None:
    """Run on the DES (16 ranks, 1.5 TB/s stand-in): each unit's reduce-scatter lists start as soon
    as both the backward compute they are built beside has started and the communication queue
    is free (a prefetched all-gather may still run there), before that compute ends."""
    for prefetch in (0, 1):
        ctx = _unprefetched(16) if prefetch == 0 else _context(16, lists=True)
        ctx.timer = RateTimer(memory_bandwidth_Bps=1.5e12)
        result = simulate_step(get_strategy("zero3"), ctx)
        spans = {span.name: span for span in result.run.spans}
        ops = result.plan.ops
        comm = [span for span in result.run.spans if span.stream == COMM]
        lists = [op for op in ops if op.kind == "host" and op.stream == COMM]
        assert len(lists) == 8
        for op in lists:
            compute, own = spans[ops[op.after_start[0]].name], spans[op.name]
            free = max((span.end_s for span in comm if span.end_s <= own.start_s + 1e-15), default=0.0)
            assert own.start_s == pytest.approx(max(compute.start_s, free))
            if prefetch == 0:  # nothing else queued: the lists start with the compute
                assert own.start_s == pytest.approx(compute.start_s)


def test_an_on_demand_gather_waits_for_the_reduce_scatters_in_flight() -> None:
    """_allgather_param synchronizes the device (torch.cuda.synchronize()) before it builds its
    lists: in backward, every on-demand all-gather's lists after the first reduce-scatter wait for
    the reduce-scatters issued since the previous fetch."""
    plan = get_strategy("zero3").build_plan(_unprefetched(16))
    ops = plan.ops
    scatters = {op.id for op in ops if op.kind == "reduce_scatter"}
    first = min(scatters)
    demand = [
        op for op in ops
        if op.kind == "host" and op.stream == COMPUTE and op.id > first
        and "on demand" in ops[op.id + 1].name and ops[op.id + 1].kind == "all_gather"
    ]  # fmt: skip
    assert demand
    assert all(scatters & set(op.after) for op in demand)
