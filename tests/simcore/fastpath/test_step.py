"""Long gradient accumulation extrapolated from a probe gives the full plan's report."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.fastpath import fold
from simcore.fastpath import step as fast_step
from simcore.fastpath.costs import fast_collective_model
from simcore.fastpath.step import MIN_EXTRAPOLATED, fast_step_report
from simcore.report import StepReport
from simcore.step.caches import StepCaches
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import StepContext, TrainingConfig
from simcore.strategies.runner import gating_device, make_context, report_step, simulate_step
from simcore.workload.loader import load_workload
from tests.simcore.fastpath.support import assert_renamed_report, assert_same_report, rename_labels
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer
from topologies import load_cluster


def _periods(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What each probe from here on found its middle micro-batches to add (None: they did not repeat)."""
    periods: list[object] = []
    original = fast_step._period

    def recorded(*args: Any) -> object:
        periods.append(original(*args))
        return periods[-1]

    monkeypatch.setattr(fast_step, "_period", recorded)
    return periods


def _full(name: str, ctx: StepContext, slowdown: float | None) -> StepReport:
    result = simulate_step(get_strategy(name), ctx, slowdown=slowdown, path="fast")
    return report_step(result, ctx, cluster="c", device="d", peak_flops=1e14)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([2, 8, 16]),
    accumulation=st.integers(MIN_EXTRAPOLATED, MIN_EXTRAPOLATED + 6),
    micro_batch=st.integers(1, 2),
    blocks=st.integers(1, 4),
    checkpoint=st.booleans(),
    slowdown=st.sampled_from([1.0, 1.1, None]),
)
def test_extrapolated_steps_report_what_the_full_plan_does(
    name: str,
    gpus: int,
    accumulation: int,
    micro_batch: int,
    blocks: int,
    checkpoint: bool,
    slowdown: float | None,
) -> None:
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        activation_checkpointing=checkpoint,
        bucket_size_bytes=8 * 2**20,
    )
    ctx = toy_context(gpus, config, workload=toy_transformer(blocks=blocks))
    got = fast_step_report(
        get_strategy(name), ctx, cluster="c", device="d", peak_flops=1e14, slowdown=slowdown
    )
    assert_same_report(got, _full(name, ctx, slowdown))


@pytest.mark.parametrize(
    ("name", "slowdown"), [("fsdp", None), ("zero2", 1.1), ("zero3", None), ("hsdp", None)]
)
def test_a_real_model_is_extrapolated_and_exact(
    name: str, slowdown: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    topology = load_cluster("dgx-a100", gpus=16)
    workload = load_workload("gpt2-medium", seq_len=512)
    config = TrainingConfig(global_batch=16 * 2 * 11, micro_batch=2, seq_len=512)
    ctx = make_context(workload, config, topology, collective=fast_collective_model(topology))
    device = gating_device(topology, "bf16")
    probes = _periods(monkeypatch)
    got = fast_step_report(
        get_strategy(name), ctx, cluster="c", device="d", peak_flops=1e14, slowdown=slowdown
    )
    assert probes and probes[-1] is not None, "a probe's middle micro-batches should repeat"
    assert got.accumulation_steps == 11
    assert_same_report(got, _full(name, ctx, slowdown))
    assert device.memory_bytes == got.memory_capacity_bytes


@pytest.mark.parametrize(
    ("name", "checkpoint"), [("fsdp", True), ("hsdp", True), ("zero3", False), ("zero2", False)]
)
def test_the_probe_reads_no_labels(name: str, checkpoint: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups and micro-batches rendered another way: the probe still repeats and is exact, and a
    peak in the last micro-batch (FSDP accumulating unsharded gradients) is renumbered."""
    config = TrainingConfig(
        global_batch=16 * 9, micro_batch=1, bucket_size_bytes=8 * 2**20, activation_checkpointing=checkpoint,
        gradient_sync_every_micro_batch=False,
    )  # fmt: skip

    def context() -> StepContext:
        return toy_context(16, config, workload=toy_transformer(blocks=3))

    original = _full(name, context(), None)
    rename_labels(monkeypatch)
    probes = _periods(monkeypatch)
    got = fast_step_report(
        get_strategy(name), context(), cluster="c", device="d", peak_flops=1e14, slowdown=None
    )
    assert probes and probes[-1] is not None, "the renamed probe's middle micro-batches should repeat"
    assert_same_report(got, _full(name, context(), None))
    assert_renamed_report(got, original)
    if name in ("fsdp", "hsdp"):
        assert got.peak_phase == "backward of block1 #9 (all_gather u1 (backward prefetch) #9)"


def test_a_probe_is_shared_between_batch_sizes_and_each_report_is_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fold, "MIN_RUN", 10**9)  # probes of the model itself, not of folded copies
    topology = load_cluster("dgx-a100", gpus=16)
    workload = load_workload("gpt2-medium", seq_len=512)
    probed: list[int] = []
    original = fast_step._probe

    def recorded(*args: Any) -> object:
        probed.append(args[2])
        return original(*args)

    monkeypatch.setattr(fast_step, "_probe", recorded)
    reports: dict[tuple[str | None, int], StepReport] = {}
    for reuse in (None, "fsdp mb=2 on 16 GPUs"):
        caches = StepCaches()  # the sweep's own: shared by its batch sizes, not by the loop before
        probed.clear()
        for k in (6, 9, 13):
            config = TrainingConfig(global_batch=16 * 2 * k, micro_batch=2, seq_len=512)
            ctx = make_context(
                workload, config, topology, collective=fast_collective_model(topology), caches=caches
            )
            reports[(reuse, k)] = fast_step_report(
                get_strategy("fsdp"),
                ctx,
                cluster="c",
                device="d",
                peak_flops=1e14,
                slowdown=None,
                reuse=reuse,
            )
        assert len(probed) == (3 if reuse is None else 1)
    for k in (6, 9, 13):
        assert reports[("fsdp mb=2 on 16 GPUs", k)] == reports[(None, k)]
        assert reports[(None, k)].accumulation_steps == k


def test_a_sweep_keeps_a_probe_per_layout_until_the_next_batch_size_reuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep evaluates every layout of one batch size before the next batch size: each probe
    must still be kept when its layout comes round again (more layouts than the 128 once kept)."""
    layouts = 130
    probed: list[int] = []
    original = fast_step._probe

    def recorded(*args: Any) -> object:
        probed.append(args[2])
        return original(*args)

    monkeypatch.setattr(fast_step, "_probe", recorded)
    caches = StepCaches()
    workload = toy_transformer(blocks=1)
    reports: dict[tuple[int, int], StepReport] = {}
    for k in (6, 9):
        config = TrainingConfig(global_batch=2 * k, micro_batch=1, bucket_size_bytes=8 * 2**20)
        ctx = replace(toy_context(2, config, workload=workload), caches=caches)
        for layout in range(layouts):
            reports[(k, layout)] = fast_step_report(
                get_strategy("fsdp"), ctx, cluster="c", device="d", peak_flops=1e14, slowdown=None,
                reuse=("layout", layout),
            )  # fmt: skip
    assert len(probed) == layouts, "every layout's probe is built once and reused by the next batch size"
    fresh = toy_context(2, TrainingConfig(global_batch=2 * 9, micro_batch=1, bucket_size_bytes=8 * 2**20),
                        workload=workload)  # fmt: skip
    alone = fast_step_report(
        get_strategy("fsdp"), fresh, cluster="c", device="d", peak_flops=1e14, slowdown=None
    )
    assert reports[(9, 0)] == alone == reports[(9, layouts - 1)]
    assert_same_report(alone, _full("fsdp", fresh, None))
