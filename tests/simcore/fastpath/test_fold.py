"""A deep model folded from three shallower copies gives the report of the whole model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.fastpath import fold
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.fastpath.step import fast_step_report
from simcore.report import StepReport
from simcore.step.plan import Label, OpKey, Phase
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import StepContext, TrainingConfig
from simcore.strategies.runner import make_context
from simcore.workload.loader import load_workload
from simcore.workload.types import ParameterTie
from tests.simcore.fastpath.support import assert_renamed_report, assert_same_report, rename_labels
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer
from topologies import load_cluster


def _report(name: str, ctx: StepContext, slowdown: float | None) -> StepReport:
    return fast_step_report(
        get_strategy(name), ctx, cluster="c", device="d", peak_flops=1e14, slowdown=slowdown
    )


def _unfolded(
    name: str, ctx: StepContext, slowdown: float | None, monkeypatch: pytest.MonkeyPatch
) -> StepReport:
    with monkeypatch.context() as patch:
        patch.setattr(fold, "MIN_RUN", 10**9)
        fresh = replace(ctx, _layer_times={}, _memo={})  # no fold plan remembered
        return _report(name, fresh, slowdown)


def _real_context(model: str, seq_len: int, cluster: str, gpus: int, config: TrainingConfig) -> StepContext:
    """``model`` on ``gpus`` GPUs of ``cluster``, collectives priced as the planner prices them."""
    topology = load_cluster(cluster, gpus=gpus)
    return make_context(
        load_workload(model, seq_len=seq_len), config, topology,
        collective=fast_collective_model(topology), concurrent=fast_concurrent_model(topology),
    )  # fmt: skip


def _folds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each fold attempt from here on extrapolated."""
    outcomes: list[bool] = []
    original = fold._extrapolate

    def recorded(*args: Any) -> StepReport | None:
        report = original(*args)
        outcomes.append(report is not None)
        return report

    monkeypatch.setattr(fold, "_extrapolate", recorded)
    return outcomes


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([2, 8, 16]),
    accumulation=st.sampled_from([1, 2, 5]),
    micro_batch=st.integers(1, 2),
    blocks=st.integers(fold.MIN_RUN, fold.MIN_RUN + 16),
    layers_per_block=st.integers(1, 4),
    checkpoint=st.booleans(),
    bucket_mb=st.sampled_from([1, 8, 25]),
    slowdown=st.sampled_from([1.0, 1.1, None]),
)
def test_a_folded_step_reports_what_the_whole_model_does(
    name: str,
    gpus: int,
    accumulation: int,
    micro_batch: int,
    blocks: int,
    layers_per_block: int,
    checkpoint: bool,
    bucket_mb: int,
    slowdown: float | None,
) -> None:
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        activation_checkpointing=checkpoint,
        bucket_size_bytes=bucket_mb * 2**20,
        zero3_prefetch_bucket_params=3_000_000,
    )
    workload = toy_transformer(blocks=blocks, layers_per_block=layers_per_block)
    with pytest.MonkeyPatch.context() as patch:
        outcomes = _folds(patch)
        got = _report(name, toy_context(gpus, config, workload=workload), slowdown)
        want = _unfolded(name, toy_context(gpus, config, workload=workload), slowdown, patch)
    if name in ("fsdp", "hsdp"):  # a unit per block: always folded
        assert outcomes == [True]
    assert_same_report(got, want)


@pytest.mark.parametrize(
    ("name", "accumulation", "checkpoint", "micro_batch"),
    # (DDP at micro-batch 2: at 1 its all-reduces outlast its blocks' backward, a backlog growing
    # block by block that that the fold takes only where it binds at any depth)
    [("fsdp", 2, False, 1), ("hsdp", 3, True, 1), ("zero3", 3, False, 1), ("ddp", 3, False, 2)],
)
def test_folding_reads_no_labels(
    name: str, accumulation: int, checkpoint: bool, micro_batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups and micro-batches rendered another way: the fold is still taken and exact, and the
    peak (in the copies' tail blocks, while a unit is gathered) is named in the new way."""
    config = TrainingConfig(
        global_batch=16 * accumulation * micro_batch, micro_batch=micro_batch, bucket_size_bytes=8 * 2**20,
        zero3_prefetch_bucket_params=3_000_000, activation_checkpointing=checkpoint,
        gradient_sync_every_micro_batch=False,
    )  # fmt: skip
    workload = toy_transformer(blocks=fold.MIN_RUN + 5, layers_per_block=2)
    original = _report(name, toy_context(16, config, workload=workload), None)
    rename_labels(monkeypatch)
    outcomes = _folds(monkeypatch)
    got = _report(name, toy_context(16, config, workload=workload), None)
    assert outcomes == [True], "the renamed plan should fold"
    assert_same_report(got, _unfolded(name, toy_context(16, config, workload=workload), None, monkeypatch))
    assert_renamed_report(got, original)
    if name != "ddp":  # (DDP's peak is the optimizer step's)
        assert " (all_gather u" in got.peak_phase and " #" in got.peak_phase


@pytest.mark.parametrize(
    ("model", "seq_len", "cluster", "gpus", "name", "micro_batch", "accumulation", "checkpoint"),
    [
        ("gpt2-xl", 1024, "dgx-a100", 128, "ddp", 2, 4, False),  # the peak moves to the forward's end
        ("gpt2-xl", 1024, "dgx-a100", 128, "fsdp", 1, 8, True),  # ties between micro-batches
        ("gpt2-xl", 1024, "dgx-a100", 128, "hsdp", 2, 4, False),
        ("llama2-7b", 1024, "hgx-h100", 64, "hsdp", 4, 2, True),  # the peak at the second-last block
        ("llama2-7b", 1024, "hgx-h100", 64, "zero3", 2, 1, False),
    ],
)
def test_real_models_fold_exactly(
    model: str,
    seq_len: int,
    cluster: str,
    gpus: int,
    name: str,
    micro_batch: int,
    accumulation: int,
    checkpoint: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        seq_len=seq_len,
        activation_checkpointing=checkpoint,
    )
    ctx = _real_context(model, seq_len, cluster, gpus, config)
    outcomes = _folds(monkeypatch)
    got = _report(name, ctx, None)
    assert outcomes == [True], "the model should fold"
    assert_same_report(got, _unfolded(name, ctx, None, monkeypatch))


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    model=st.sampled_from(
        [
            ("gpt2-medium", 512),
            ("gpt2-large", 1024),
            ("gpt2-xl", 1024),
            ("llama2-7b", 2048),
            ("bert-large", 512),
        ]
    ),
    cluster=st.sampled_from(["dgx-a100", "hgx-h100", "g5.48xlarge", "p4d.24xlarge"]),
    name=st.sampled_from(["ddp", "fsdp", "hsdp", "zero3"]),
    gpus=st.sampled_from([8, 16, 64]),
    micro_batch=st.sampled_from([1, 2, 4]),
    accumulation=st.sampled_from([1, 2, 3, 8]),
    checkpoint=st.booleans(),
    dtype=st.sampled_from(["bf16", "fp32"]),
    slowdown=st.sampled_from([None, 1.1]),
)
def test_real_models_fold_to_what_the_whole_model_does(
    model: tuple[str, int],
    cluster: str,
    name: str,
    gpus: int,
    micro_batch: int,
    accumulation: int,
    checkpoint: bool,
    dtype: str,
    slowdown: float | None,
) -> None:
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation, micro_batch=micro_batch, seq_len=model[1],
        activation_checkpointing=checkpoint, dtype=dtype,
    )  # fmt: skip
    ctx = _real_context(model[0], model[1], cluster, gpus, config)
    try:
        got = _report(name, ctx, slowdown)
    except TrainsimError:  # hsdp on part of a node, say: refused the same way unfolded
        return
    with pytest.MonkeyPatch.context() as patch:
        want = _unfolded(name, ctx, slowdown, patch)
    # Exact (1e-9) is the fold's aim, but not yet its guarantee: a step whose time per block changes
    # regime past the copies' depths is extrapolated from the shallower regime (the strict xfail
    # below). The property holds the fold to the event-free path's promise against the engine, 1%.
    assert got.step_time_s == pytest.approx(want.step_time_s, rel=0.01)
    assert got.peak_memory_bytes == pytest.approx(want.peak_memory_bytes, rel=0.01)


@pytest.mark.slow
def test_a_regime_change_past_the_copies_is_not_folded() -> None:
    """Found by the property above: DDP of Llama-2-7B on 16 GPUs of p4d.24xlarge, micro-batch 2, no
    accumulation: the time per block is constant to about 22 blocks and then rises (the comm
    stream's backlog shrinks a little per block and is gone there); copies of 4, 5 and 6 blocks
    all sat in the first regime, and three copies folded it 0.12% short. The deeper copy's blocks
    do not repeat (its comm stream's period is not its compute's): evaluated whole, exactly."""
    config = TrainingConfig(global_batch=32, micro_batch=2, seq_len=2048, dtype="bf16")
    ctx = _real_context("llama2-7b", 2048, "p4d.24xlarge", 16, config)
    with pytest.MonkeyPatch.context() as patch:
        outcomes = _folds(patch)
        got = _report("ddp", ctx, None)
        assert outcomes == []
        assert_same_report(got, _unfolded("ddp", ctx, None, patch))


def test_a_growing_backlog_is_folded_where_it_binds_at_any_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP at micro-batch 1 on the toy cluster: each block's all-reduce outlasts its backward, so
    the comm stream falls further behind per block, its collectives back to back, and the step
    ends when its last one does: the more blocks, the more so. Folded, by the comm stream's
    period, to every field of the whole model's report."""
    config = TrainingConfig(global_batch=16, micro_batch=1, bucket_size_bytes=8 * 2**20)
    workload = toy_transformer(blocks=fold.MIN_RUN + 5, layers_per_block=2)
    outcomes = _folds(monkeypatch)
    got = _report("ddp", toy_context(16, config, workload=workload), None)
    assert outcomes == [True]
    assert_same_report(got, _unfolded("ddp", toy_context(16, config, workload=workload), None, monkeypatch))


def test_a_growing_backlog_of_collectives_slowed_under_compute_is_folded_from_deeper_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DDP of GPT-2 XL on 256 A100s, micro-batch 1: the all-reduces fall behind the backward per
    block and run slower while it computes, faster in the tail after it: the step rises by less
    than the comm stream's period. The copies of 4 and 5 blocks do not differ by the periods, so
    copies of 5 and 6 (the 6 checked too) that rise alike fold it, to every field of the report."""
    config = TrainingConfig(global_batch=256, micro_batch=1, seq_len=1024)
    ctx = _real_context("gpt2-xl", 1024, "dgx-a100", 256, config)
    depths: list[int] = []
    original = fold._extrapolate

    def recorded(measured: Any, plan: Any, *rest: Any) -> StepReport | None:
        depths.extend(plan.depths)
        return original(measured, plan, *rest)

    monkeypatch.setattr(fold, "_extrapolate", recorded)
    got = _report("ddp", ctx, None)
    assert depths == [5, 6]
    assert_same_report(got, _unfolded("ddp", ctx, None, monkeypatch))


def test_zero3_prefetch_buckets_across_blocks_are_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """ZeRO-3's prefetch buckets of GPT-2 XL span 1.5 blocks and repeat every 5 (3 buckets): the
    copies of 13 and 18 blocks fold it (its first buckets, cut from the model's start, differ:
    the deeper copy's windows are found past them), to every field of the whole model's report."""
    config = TrainingConfig(global_batch=128 * 2 * 4, micro_batch=2, seq_len=1024)
    ctx = _real_context("gpt2-xl", 1024, "dgx-a100", 128, config)
    outcomes = _folds(monkeypatch)
    got = _report("zero3", ctx, None)
    assert outcomes == [True]
    plan = ctx.memo(("fold", "zero3", ctx.config), lambda: None)
    assert isinstance(plan, fold._Plan) and plan.depths == (13, 18) and plan.check == (5, 0, 18)
    assert_same_report(got, _unfolded("zero3", ctx, None, monkeypatch))


def test_collectives_as_large_as_the_model_are_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """ZeRO-2 reduces GPT-2 XL in 5e8-element buckets (17 blocks each): no copy has that plan."""
    config = TrainingConfig(global_batch=16 * 2, micro_batch=2, seq_len=1024)
    ctx = _real_context("gpt2-xl", 1024, "dgx-a100", 16, config)
    assert not hasattr(get_strategy("zero2"), "layer_groups")
    outcomes = _folds(monkeypatch)
    _report("zero2", ctx, None)
    assert outcomes == []


def test_the_longest_run_of_identical_blocks_is_found() -> None:
    assert fold.identical_run(load_workload("gpt2-xl", seq_len=1024)) == (0, 48)
    assert fold.identical_run(toy_transformer(blocks=20)) == (0, 20)
    resnet = fold.identical_run(load_workload("resnet50"))
    assert resnet is not None and resnet[1] < fold.MIN_RUN  # stages differ: nothing to fold


def test_a_copy_keeps_the_ends_of_the_run_with_their_names_and_ties() -> None:
    workload = toy_transformer(blocks=20, layers_per_block=2)
    tied = replace(workload, ties=(ParameterTie(1_000_000, (0, len(workload.layers) - 1)),))
    copy = fold.shallower(tied, (0, 20), 5)
    assert copy is not None
    assert copy.workload.block_names == ("block0", "block1", "block17", "block18", "block19")
    assert copy.kept == (0, 1, 2, 3, 4, *range(35, 42))
    assert [layer.name for layer in copy.workload.layers][1:3] == ["block0.l0", "block0.l1"]
    assert copy.workload.ties[0].layers == (0, len(copy.workload.layers) - 1)
    assert copy.workload.params == tied.params - 15 * 2 * 2_000_000
    inner = replace(workload, ties=(ParameterTie(2_000_000, (3, 20)),))  # a tie into removed blocks
    assert fold.shallower(inner, (0, 20), 5) is None


def test_group_numbers_in_phases_are_named_by_blocks_the_same_in_a_copy_and_the_model() -> None:
    workload = toy_transformer(blocks=20, layers_per_block=1)
    copy = fold.shallower(workload, (0, 20), 4)
    assert copy is not None
    unit_of = list(range(len(workload.layers)))  # one unit per layer: embed 0, block b is b + 1
    copy_units = list(range(len(copy.workload.layers)))
    model, small = fold._Names(workload, unit_of), fold._Names(copy.workload, copy_units)
    prefetch = Label("all_gather ", "unit", " (backward prefetch)")
    backward = Label("backward of block18")

    def phase(block: int, unit: int) -> Phase:
        return ((backward, OpKey(block=block)), (prefetch, OpKey(group=unit)))

    # The copy's first tail block (block18, the copy's block 2) prefetches its last head block
    # (block1, unit 2); the model's block18 prefetches block17 (unit 18): the same neighbour, one
    # block back.
    canonical = small.canonical(phase(2, 2))
    assert canonical == model.canonical(phase(18, 18))
    assert model.named(canonical) == "backward of block18 (all_gather unit 18 (backward prefetch))"
    assert small.named(canonical) == "backward of block18 (all_gather unit 2 (backward prefetch))"
    reduce = Label("reduce_scatter ", "unit")
    alone: Phase = ((reduce, OpKey(group=0)), None)  # a group outside the blocks: named by its layer
    assert small.canonical(alone) == model.canonical(alone)
    assert model.named(small.canonical(alone)) == "reduce_scatter unit 0"
    last = ((reduce, OpKey(group=4)), None)  # the copy's block19: the model's unit 20
    assert model.named(small.canonical(last)) == "reduce_scatter unit 20"
    deeper = fold._Names(toy_transformer(blocks=30, layers_per_block=1), list(range(32)))
    outside = ((Label("backward of block25"), OpKey(block=25)), None)
    assert small.named(deeper.canonical(outside)) is None  # block25 is not in the copy


@pytest.mark.parametrize("phase", ["fwd", "bwd", "recompute"])
def test_a_copy_times_its_layers_as_the_model_and_the_timer_do(phase: str) -> None:
    """A copy's context reads the model's per-layer times for the layers it keeps: the numbers the
    compute model derives for the copy itself, bit for bit (so no copy is timed layer by layer)."""
    config = TrainingConfig(global_batch=128, micro_batch=2, seq_len=1024)
    ctx = _real_context("gpt2-xl", 1024, "dgx-a100", 16, config)
    run = fold.identical_run(ctx.workload)
    assert run is not None
    copy = fold.shallower(ctx.workload, run, 5)
    assert copy is not None
    sub = fold._context(ctx, 5, copy)
    assert sub.timer is not ctx.timer  # the model's times, through the copy's timer
    kernel, host = ctx.timer.layer_parts_s(copy.workload, 2, phase)  # type: ignore[attr-defined]
    own = ctx.timer.layer_times_s(copy.workload, 2, phase)  # type: ignore[attr-defined]
    model = ctx.layer_times(phase)
    assert sub.layer_times(phase) == [float(t) for t in own] == [model[i] for i in copy.kept]
    got_kernel, got_host = sub.timer.layer_parts_s(copy.workload, 2, phase)  # type: ignore[attr-defined]
    assert list(got_kernel) == list(kernel) and list(got_host) == list(host)
    assert sub.span_time(phase, range(len(copy.workload.layers))) == _fresh_span(ctx, copy, phase)


def _fresh_span(ctx: StepContext, copy: Any, phase: str) -> float:
    """The copy's whole span timed by a context of its own on the model's timer."""
    own = replace(ctx, workload=copy.workload, _layer_times={}, _memo={}, whole=ctx)
    return own.span_time(phase, range(len(copy.workload.layers)))
