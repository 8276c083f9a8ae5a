"""The per-rank memory model: a published Mistral-7B example, ZeRO's ordering, the timeline.

The Mistral-7B figures are the article "Understanding Distributed Training Strategies and Hardware
Effects".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.memory import CATEGORIES, MemoryTimeline, model_state_bytes
from simcore.errors import TrainsimError
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import simulate_step
from simcore.workload.loader import load_workload
from tests.simcore.strategies.test_strategies_support import toy_context

GB = 1e9


def test_mistral_7b_adam_pure_bf16_keeps_its_states_in_bf16() -> None:
    # The seed article ("Fine-tuning a Mistral-7B model with Adam in BF16 requires approximately:
    # parameters 14 GB, gradients 14 GB, optimizer states (Adam) ~58 GB") counts fp32 moments; torch's
    # Adam creates its moments with zeros_like(param) (torch/optim/adam.py, _init_group), so pure bf16
    # training keeps them in bf16: 29 GB.
    params = load_workload("mistral-7b").params
    cfg = TrainingConfig(dtype="bf16", optimizer="adam", master_weights=False)
    states = model_state_bytes(0, params, 1, cfg.param_bytes, cfg.grad_bytes, cfg.optimizer_bytes)
    assert states["params"] / GB == pytest.approx(14, rel=0.05)
    assert states["grads"] / GB == pytest.approx(14, rel=0.05)
    assert states["optimizer"] / GB == pytest.approx(29, rel=0.02)


def test_mistral_7b_ddp_with_fp32_master_weights_does_not_fit_an_80gb_a100() -> None:
    from simcore.compute.precision import resolve_precision
    from simcore.hardware import device_spec
    from simcore.strategies.base import optimizer_state_bytes

    params = load_workload("mistral-7b").params
    mixed = resolve_precision("mixed", "bf16", "ddp", framework="torch-ddp")
    per_param = mixed.bytes("param") + mixed.bytes("grad") + optimizer_state_bytes(mixed, "adam")
    assert per_param == 16  # ZeRO paper, sec. 3.1
    assert params * per_param > device_spec("a100-sxm-80gb").memory_bytes


@given(
    params=st.integers(1, 10**11),
    ranks=st.integers(1, 4096),
    precision=st.sampled_from([(2, 2), (4, 4)]),
    optimizer_bytes=st.sampled_from([0, 4, 8, 12]),
)
def test_model_state_order_ddp_zero1_zero2_zero3(
    params: int, ranks: int, precision: tuple[int, int], optimizer_bytes: int
) -> None:
    totals = [
        sum(model_state_bytes(stage, params, ranks, *precision, optimizer_bytes).values())
        for stage in range(4)
    ]
    assert totals == sorted(totals, reverse=True)
    # ZeRO-3 divides everything by the group size (ZeRO paper, section 5.1)
    assert totals[3] * ranks == pytest.approx(totals[0])


def test_model_state_bytes_rejects_unknown_stage() -> None:
    with pytest.raises(TrainsimError, match="ZeRO stage 4 unknown"):
        model_state_bytes(4, 10, 1, 2, 2, 12)


def test_timeline_tracks_peak_phase_and_breakdown() -> None:
    timeline = MemoryTimeline(capacity_bytes=100.0)
    timeline.apply([("params", 40.0), ("overhead", 5.0)], "start of step")
    timeline.apply([("activations", 30.0)], "forward of block1", 1.0)
    timeline.apply([("grads", 10.0), ("activations", -30.0)], "backward of block1", 2.0)
    peak = timeline.peak()
    assert peak.peak_bytes == 75.0 and peak.phase == "forward of block1" and peak.fits
    assert peak.breakdown["activations"] == 30.0 and set(peak.breakdown) == set(CATEGORIES)
    timeline.apply([("buffers", 60.0)], "optimizer step", 3.0)
    late = timeline.peak()
    assert not late.fits and late.phase == "optimizer step"
    assert (
        late.verdict().startswith("OOM: peak 0.0 GiB exceeds") and "during optimizer step" in late.verdict()
    )
    assert peak.status == "fits" and late.status == "OOM"


def test_verdict_flags_less_than_ten_percent_headroom() -> None:
    timeline = MemoryTimeline(capacity_bytes=100.0)
    timeline.apply([("params", 95.0)], "start of step")
    assert timeline.peak().status == "fits with < 10% headroom"
    assert timeline.peak().verdict().startswith("fits with < 10% headroom")


def test_fragmentation_is_charged_on_the_tensors_at_the_peak() -> None:
    timeline = MemoryTimeline(capacity_bytes=1000.0, fragmentation=0.1)
    timeline.apply([("params", 100.0), ("overhead", 50.0)], "start of step")
    peak = timeline.peak()
    assert peak.peak_bytes == pytest.approx(160.0) and peak.breakdown["overhead"] == pytest.approx(60.0)


def test_timeline_rejects_unknown_category() -> None:
    with pytest.raises(TrainsimError, match="memory category 'kv'"):
        MemoryTimeline(1.0).apply([("kv", 1.0)], "x")


def test_activation_checkpointing_lowers_the_activation_peak() -> None:
    strategy = get_strategy("ddp")
    plain = simulate_step(strategy, toy_context(4, TrainingConfig(global_batch=8, micro_batch=2))).run
    ckpt = simulate_step(
        strategy, toy_context(4, TrainingConfig(global_batch=8, micro_batch=2, activation_checkpointing=True))
    ).run
    assert ckpt.memory.category_max["activations"] < plain.memory.category_max["activations"]
    # The step's peak may sit in the optimizer step (its scratch memory), never higher with checkpoints.
    assert max(s[1] for s in ckpt.memory.samples) <= max(s[1] for s in plain.memory.samples)


def test_ddp_buckets_are_a_copy_of_the_gradients_unless_views() -> None:
    strategy = get_strategy("ddp")
    copy = simulate_step(strategy, toy_context(4, TrainingConfig(global_batch=8, micro_batch=2))).plan
    view = simulate_step(
        strategy, toy_context(4, TrainingConfig(global_batch=8, micro_batch=2, gradient_as_bucket_view=True))
    ).plan
    params = toy_context(4).workload.params
    # DDP's own precision (autocast): fp32 gradients, so fp32 buckets
    assert copy.initial_memory["buffers"] == params * 4 and view.initial_memory["buffers"] == 0


@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_fsdp_holds_at_most_prefetch_plus_one_gathered_units(prefetch: int) -> None:
    ctx = toy_context(8, TrainingConfig(global_batch=16, micro_batch=2, prefetch=prefetch))
    run = simulate_step(get_strategy("fsdp"), ctx).run
    unit_bytes = 3 * 2_000_000 * 2  # one block = one unit of 3 layers, bf16
    root_bytes = (4_000_000 + 1_000_000) * 2  # the root (embedding + head) stays gathered
    gradient_bytes = unit_bytes + root_bytes  # unsharded gradients awaiting reduce-scatter
    kept_input = max(unit_bytes, root_bytes)  # the previous unit's reduce-scatter input (FSDP2)
    bound = root_bytes + (prefetch + 1) * unit_bytes + gradient_bytes + kept_input
    assert run.memory.category_max["buffers"] <= bound
    assert run.memory.category_max["buffers"] >= root_bytes + unit_bytes
