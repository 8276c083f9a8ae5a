"""The strategies' step plans: invariants theory gives, on stand-in compute and collectives."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.host_syncs import syncs_per_step
from simcore.errors import TrainsimError
from simcore.step.plan import COMM
from simcore.strategies import STRATEGIES, get_strategy, strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.strategies.ddp import assign_buckets
from simcore.strategies.runner import percentile, simulate_step
from tests.simcore.strategies.test_strategies_support import AlphaBeta, toy_context, toy_transformer

NAMES = strategy_names()
GPU_COUNTS = [1, 2, 4, 8, 16]
SLOW = 1.1


def run(name: str, gpus: int, config: TrainingConfig | None = None, **kwargs: object):
    """``name``'s step on the stand-ins; a config without a precision runs the ZeRO paper's mixed one."""
    if config is not None and config.precision == "auto":
        config = replace(config, precision="mixed")
    ctx = toy_context(gpus, config, **kwargs)  # type: ignore[arg-type]
    return simulate_step(get_strategy(name), ctx, slowdown=SLOW), ctx


def test_registry_holds_the_six_strategies() -> None:
    assert NAMES == ["ddp", "fsdp", "zero1", "zero2", "zero3", "hsdp"]
    with pytest.raises(TrainsimError, match="unknown strategy 'zero4'; known: ddp"):
        get_strategy("zero4")


def test_accumulation_must_divide() -> None:
    config = TrainingConfig(global_batch=48, micro_batch=4)
    assert config.accumulation_steps(4) == 3
    with pytest.raises(
        TrainsimError, match="global batch 48 is not divisible by gpus x micro-batch = 8 x 4 = 32"
    ):
        config.accumulation_steps(8)


@pytest.mark.parametrize(
    "bad",
    [
        {"dtype": "int8"},
        {"optimizer": "lion"},
        {"micro_batch": 0},
        {"comm_compute_slowdown": 0.5},
        {"prefetch": -1},
    ],
)
def test_config_rejects_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(TrainsimError, match="training config"):
        TrainingConfig(**bad)  # type: ignore[arg-type]


def test_bytes_per_parameter_follow_the_zero_paper() -> None:
    mixed = TrainingConfig(dtype="bf16", optimizer="adam", precision="mixed")
    assert (mixed.param_bytes, mixed.grad_bytes, mixed.optimizer_bytes) == (2, 2, 12)  # 16 B/param
    amp = TrainingConfig(dtype="bf16", optimizer="adam")  # autocast: fp32 params, grads, states
    assert (amp.param_bytes, amp.grad_bytes, amp.optimizer_bytes) == (4, 4, 8)
    # pure bf16: torch keeps Adam's moments in the parameters' dtype
    assert TrainingConfig(dtype="bf16", optimizer="adam", master_weights=False).optimizer_bytes == 4
    assert TrainingConfig(dtype="fp32", optimizer="sgd").optimizer_bytes == 0
    assert TrainingConfig(dtype="fp32", optimizer="sgd-momentum").optimizer_bytes == 4


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    gpus=st.sampled_from(GPU_COUNTS),
    micro=st.sampled_from([1, 2]),
    prefetch=st.integers(0, 2),
    reshard=st.booleans(),
    checkpoint=st.booleans(),
    inter=st.floats(1e9, 1e11),
)
def test_step_time_is_at_least_compute_time(
    name: str, gpus: int, micro: int, prefetch: int, reshard: bool, checkpoint: bool, inter: float
) -> None:
    config = TrainingConfig(
        global_batch=32,
        micro_batch=micro,
        prefetch=prefetch,
        reshard_after_forward=reshard,
        activation_checkpointing=checkpoint,
    )
    result, _ = run(name, gpus, config, collective=AlphaBeta(inter_Bps=inter))
    assert result.run.step_time_s >= result.plan.compute_s() * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    gpus=st.sampled_from([2, 8, 16]),
    scale=st.floats(1.0, 20.0),
    inter=st.floats(1e9, 5e10),
    prefetch=st.integers(0, 2),
)
def test_more_bandwidth_is_never_slower(
    name: str, gpus: int, scale: float, inter: float, prefetch: int
) -> None:
    config = TrainingConfig(global_batch=32, micro_batch=2, prefetch=prefetch)
    slow, _ = run(name, gpus, config, collective=AlphaBeta(intra_Bps=1e11, inter_Bps=inter))
    fast, _ = run(name, gpus, config, collective=AlphaBeta(intra_Bps=1e11 * scale, inter_Bps=inter * scale))
    assert fast.run.step_time_s <= slow.run.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_single_gpu_does_not_communicate(name: str) -> None:
    result, ctx = run(name, 1)
    assert result.plan.comm_bytes() == 0
    assert all(s.end_s == s.start_s for s in result.run.spans if s.stream == COMM)
    assert result.run.step_time_s == pytest.approx(result.plan.compute_s(), rel=1e-12)
    expected = ctx.accumulation * ctx.microbatch_compute_s()
    copies = sum(
        op.duration_s for op in result.plan.ops if op.kind == "copy"
    )  # DDP's reducer runs on 1 GPU too
    assert result.plan.compute_s() - expected - copies == pytest.approx(
        ctx.timer.optimizer_time_s(ctx.workload.params, "adamw")
        # the loop's host syncs: each a dispatch (free on this test double) plus a 5 us launch
        + syncs_per_step(get_strategy(name).framework) * 5e-6
    )


@pytest.mark.parametrize("name", NAMES)
def test_memory_returns_to_the_between_steps_state(name: str) -> None:
    result, _ = run(name, 8, TrainingConfig(global_batch=32, micro_batch=2, activation_checkpointing=True))
    current = result.run.memory.current
    assert current["activations"] == pytest.approx(0.0, abs=1.0)
    assert current["grads"] == pytest.approx(0.0, abs=1.0)
    assert current["buffers"] == pytest.approx(result.plan.initial_memory.get("buffers", 0.0), abs=1.0)


@pytest.mark.parametrize("name", ["fsdp", "zero3", "hsdp"])
def test_sharded_memory_falls_as_gpus_are_added(name: str) -> None:
    # tensors only: NCCL's buffers grow with HSDP's second communicator once it spans nodes
    config = TrainingConfig(global_batch=32, micro_batch=2, allocator_overhead_bytes=0)
    peaks = [run(name, n, config)[0].run.memory.peak().peak_bytes for n in GPU_COUNTS]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(peaks)), peaks
    if name != "hsdp":
        assert peaks[-1] < peaks[0]


@pytest.mark.parametrize("gpus", [2, 8, 16])
def test_peak_memory_order_ddp_zero1_zero2(gpus: int) -> None:
    config = TrainingConfig(global_batch=64, micro_batch=2)
    peaks = {
        name: run(name, gpus, config)[0].run.memory.peak().peak_bytes
        for name in ("ddp", "zero1", "zero2", "zero3")
    }
    assert peaks["ddp"] >= peaks["zero1"] >= peaks["zero2"], peaks
    assert peaks["zero3"] <= peaks["zero1"], peaks


@pytest.mark.parametrize(
    ("name", "stage"), [("ddp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3), ("fsdp", 3)]
)
def test_plans_hold_the_zero_paper_model_states(name: str, stage: int) -> None:
    from simcore.compute.memory import model_state_bytes

    result, ctx = run(name, 8, TrainingConfig(global_batch=16, micro_batch=2))
    cfg, params = ctx.config, ctx.workload.params
    expected = model_state_bytes(stage, params, 8, cfg.param_bytes, cfg.grad_bytes, cfg.optimizer_bytes)
    initial = result.plan.initial_memory
    assert initial["params"] == pytest.approx(expected["params"])
    assert initial["optimizer"] == pytest.approx(expected["optimizer"])


def test_ddp_overlaps_buckets_with_backward() -> None:
    result, _ = run(
        "ddp", 16, TrainingConfig(global_batch=16, micro_batch=1), collective=AlphaBeta(inter_Bps=1e11)
    )
    comm_s = sum(s.end_s - s.start_s for s in result.run.spans if s.stream == COMM)
    exposed = result.run.step_time_s - result.plan.compute_s()
    assert comm_s > 0 and exposed < comm_s


def test_ddp_buckets_fill_from_the_last_layer() -> None:
    ctx = toy_context(
        2, TrainingConfig(global_batch=4, micro_batch=2, bucket_size_bytes=8_000_000, first_bucket_bytes=1)
    )
    buckets = assign_buckets(ctx, 2)
    assert buckets[-1] == 0  # the head is in the first bucket
    assert buckets == sorted(buckets, reverse=True)  # bucket ids grow towards the first layer
    # 4 MB per 2-M-parameter layer in bf16: two layers per 8 MB bucket after the 1-byte first one
    assert max(buckets) == 1 + math.ceil(12 / 2)


def test_same_seed_same_jittered_steps_and_p99_above_p50() -> None:
    config = TrainingConfig(global_batch=32, micro_batch=2, steps=30, compute_jitter_sigma=0.1)
    strategy = get_strategy("fsdp")
    a = simulate_step(strategy, toy_context(8, config), seed=3, slowdown=SLOW).step_times_s
    b = simulate_step(strategy, toy_context(8, config), seed=3, slowdown=SLOW).step_times_s
    c = simulate_step(strategy, toy_context(8, config), seed=4, slowdown=SLOW).step_times_s
    assert a == b and a != c
    assert percentile(a, 99) > percentile(a, 50)


def test_without_jitter_every_step_is_the_same() -> None:
    config = TrainingConfig(global_batch=32, micro_batch=2, steps=10)
    times = simulate_step(get_strategy("ddp"), toy_context(8, config), slowdown=SLOW).step_times_s
    assert len(times) == 10 and percentile(times, 99) == percentile(times, 50)


def test_misaligned_wrap_costs_an_exposed_round_trip() -> None:
    base = TrainingConfig(global_batch=16, micro_batch=2, prefetch=1)
    collective = AlphaBeta(inter_Bps=2e10, alpha_s=1e-4)
    aligned, _ = run("fsdp", 8, base, collective=collective)
    split, _ = run("fsdp", 8, replace(base, wrap="every-2-layers"), collective=collective)
    assert split.run.step_time_s > aligned.run.step_time_s
    on_demand = [op.name for op in split.plan.ops if "on demand" in op.name]
    assert any("forward" in n for n in on_demand) and any("backward" in n for n in on_demand)


def test_hsdp_on_one_node_is_fsdp() -> None:
    config = TrainingConfig(global_batch=32, micro_batch=2)
    fsdp, _ = run("fsdp", 8, config)
    hsdp, _ = run("hsdp", 8, config)
    assert hsdp.run.step_time_s == pytest.approx(fsdp.run.step_time_s, rel=1e-12)


def test_hsdp_keeps_collectives_inside_a_node_except_the_shard_all_reduce() -> None:
    result, ctx = run("hsdp", 16, TrainingConfig(global_batch=32, micro_batch=2))
    kinds = {op.kind for op in result.plan.ops if op.stream == COMM}
    assert kinds == {"all_gather", "reduce_scatter", "all_reduce"}
    assert ctx.node == tuple(range(8)) and ctx.cross_node == (0, 8)


def test_every_strategy_is_registered_with_a_description() -> None:
    for name, strategy in STRATEGIES.items():
        assert strategy.name == name and strategy.description


def test_toy_workload_shape() -> None:
    workload = toy_transformer()
    assert workload.params == 4_000_000 + 12 * 2_000_000 + 1_000_000


def test_hsdp_needs_whole_nodes() -> None:
    with pytest.raises(TrainsimError, match="hsdp needs whole nodes: 12 GPUs do not fill nodes of 8"):
        run("hsdp", 12, TrainingConfig(global_batch=24, micro_batch=2))


def test_streams_of_other_ranks_are_coupled_only_to_their_own_comm() -> None:
    from simcore.engine import Simulation
    from simcore.step.des import run_plan
    from simcore.step.plan import PlanBuilder

    builder = PlanBuilder("two ranks")
    builder.compute("work", 1.0)
    builder.add("rank1/compute", "work on rank 1", 1.0)
    builder.add("rank1/comm", "collective on rank 1", 1.0, kind="all_reduce")
    run = run_plan(Simulation(0), builder.plan, capacity_bytes=1.0, slowdown=2.0)
    ends = {s.name: s.end_s for s in run.spans}
    assert ends["work"] == 1.0  # rank 0 has no communication: full speed
    # half speed during rank 1's 1 s collective (0.5 s of work), then full speed: 1.5 s
    assert ends["work on rank 1"] == 1.5
    straggler = run_plan(Simulation(0), builder.plan, capacity_bytes=1.0, compute_scale={"rank1": 3.0})
    assert {s.name: s.end_s for s in straggler.spans}["work on rank 1"] == 3.0
