"""The cross entropy's working tensors: held while the loss runs, on top of what is saved."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.memory import cross_entropy_working_bytes
from simcore.errors import TrainsimError
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import simulate_step
from simcore.workload.types import Layer, Workload
from tests.simcore.strategies.test_strategies_support import toy_context

LOGITS = 8192 * 128256  # one Llama 3 sample of 8192 tokens


def test_bf16_logits_forward_holds_logits_their_fp32_copy_and_the_log_softmax() -> None:
    forward, backward = cross_entropy_working_bytes(LOGITS, 2)
    assert forward == 2 * LOGITS + 4 * LOGITS + 4 * LOGITS
    assert backward == 4 * LOGITS + 4 * LOGITS  # nll_loss's dense gradient, log-softmax's gradient


def test_fp32_logits_are_not_copied() -> None:
    forward, backward = cross_entropy_working_bytes(LOGITS, 4)
    assert forward == 4 * LOGITS + 4 * LOGITS
    assert backward == 8 * LOGITS


@given(st.floats(0, 1e12), st.sampled_from([1, 2, 4]))
def test_working_bytes_grow_with_the_logits(logits: float, elem: int) -> None:
    forward, backward = cross_entropy_working_bytes(logits, elem)
    assert forward >= 2 * logits * 4 - 1e-3 * max(1.0, logits) and backward == 8 * logits
    bigger = cross_entropy_working_bytes(2 * logits, elem)
    assert bigger[0] == pytest.approx(2 * forward) and bigger[1] == pytest.approx(2 * backward)


def _head_workload(vocab: int, with_loss: bool) -> Workload:
    tokens, hidden = 64, 32
    head_out = 2.0 * tokens * vocab  # bf16 logits of one sample
    layers = [
        Layer(
            "a", "linear", -1, hidden * hidden, 1e6, 2e6, 2.0 * tokens * hidden, 2.0 * tokens * hidden, 1e5
        ),
        Layer("lm_head", "linear", -1, hidden * vocab, 1e6, 2e6, 4.0 * tokens * vocab, head_out, 1e5),
    ]
    if with_loss:
        layers.append(Layer("loss", "loss", -1, 0, 0.0, 0.0, 0.0, 4.0, (12.0 + 2) * tokens * vocab))
    return Workload("head", tuple(layers), (), "bf16", 0, "test")


def test_the_step_peak_holds_the_backward_working_set_above_the_saved_log_softmax() -> None:
    """DDP, micro-batch 2: the peak rises by exactly 2 x (2 fp32 logit-sized gradients): the loss's
    backward starts with every activation (the head's fp32 log-probabilities among them) still held,
    which is the step's largest moment, and the forward's working set (10 B per logit, the head's
    own 4 B not saved yet) stays below it."""
    vocab, tokens, mb = 50_000, 64, 2
    cfg = TrainingConfig(global_batch=2 * mb, micro_batch=mb, optimizer_impl="fused", precision="mixed")

    def run(with_loss: bool):
        ctx = toy_context(2, cfg, workload=_head_workload(vocab, with_loss))
        return simulate_step(get_strategy("ddp"), ctx).run

    with_loss, without = run(True), run(False)
    logits = tokens * vocab
    assert with_loss.memory.category_max["temp"] == pytest.approx(mb * 10 * logits)
    assert with_loss.memory.current["temp"] == pytest.approx(0.0, abs=1e-6)
    raw = max(total for _, total, _ in with_loss.memory.samples)
    raw_without = max(total for _, total, _ in without.memory.samples)
    assert raw - raw_without == pytest.approx(mb * 8 * logits, rel=1e-9)


def test_vocab_parallel_loss_holds_one_fp32_tensor_more_each_way() -> None:
    """torch's loss_parallel: x, shifted and exp(shifted) in forward; zeros_like(x), exp(x) and their
    sum in backward."""
    forward, backward = cross_entropy_working_bytes(LOGITS, 2, vocab_parallel=True)
    assert forward == 2 * LOGITS + 4 * LOGITS + 4 * LOGITS + 4 * LOGITS
    assert backward == 3 * 4 * LOGITS


def test_a_tensor_parallel_stage_runs_the_loss_vocab_parallel() -> None:
    from simcore.parallel import ParallelLayout, ParallelOptions
    from simcore.parallel.step import compose_parallel_step
    from tests.simcore.parallel.support import cluster, small_gpt

    def temp(tp: int) -> float:
        report = compose_parallel_step(
            small_gpt(tied=False), TrainingConfig(global_batch=16, micro_batch=2), cluster("hgx-h100", 8),
            "fsdp", ParallelLayout(tp=tp), ParallelOptions(), path="fast",
        ).report  # fmt: skip
        return report.memory_breakdown["temp"]

    logits = 512 * 4096  # small_gpt: seq 512, vocab 4096, per sample
    assert temp(1) == pytest.approx(2 * 8 * logits)  # the peak at the loss's backward
    assert temp(2) == pytest.approx(2 * 12 * logits / 2)


def test_megatron_cross_entropy_works_in_place() -> None:
    """Megatron-Core: forward the bf16 logits and one fp32 copy (normalised in place into the saved
    softmax); backward only the cast of the in-place gradient back to bf16; fp32 logits copy nothing."""
    assert cross_entropy_working_bytes(LOGITS, 2, kernel="megatron") == (6 * LOGITS, 2 * LOGITS)
    assert cross_entropy_working_bytes(LOGITS, 2, True, kernel="megatron") == (6 * LOGITS, 2 * LOGITS)
    assert cross_entropy_working_bytes(LOGITS, 4, kernel="megatron") == (4 * LOGITS, 0.0)
    with pytest.raises(TrainsimError, match="allowed: torch, megatron"):
        cross_entropy_working_bytes(LOGITS, 2, kernel="apex")
    with pytest.raises(TrainsimError, match="cross_entropy 'apex' is not known"):
        TrainingConfig(cross_entropy="apex")


@given(st.floats(0, 1e12), st.sampled_from([1, 2, 4]), st.booleans())
def test_megatron_never_holds_more_than_torch(logits: float, elem: int, vocab_parallel: bool) -> None:
    torch_f, torch_b = cross_entropy_working_bytes(logits, elem, vocab_parallel)
    megatron_f, megatron_b = cross_entropy_working_bytes(logits, elem, vocab_parallel, "megatron")
    assert megatron_f <= torch_f and megatron_b <= torch_b


def test_the_step_peak_with_megatron_loss_holds_one_bf16_gradient_above_the_saved_softmax() -> None:
    """As the torch test above, with Megatron's loss: backward adds the bf16 gradient cast only."""
    vocab, tokens, mb = 50_000, 64, 2
    cfg = TrainingConfig(
        global_batch=2 * mb,
        micro_batch=mb,
        optimizer_impl="fused",
        precision="mixed",
        cross_entropy="megatron",
    )

    def run(with_loss: bool):
        ctx = toy_context(2, cfg, workload=_head_workload(vocab, with_loss))
        return simulate_step(get_strategy("ddp"), ctx).run

    with_loss, without = run(True), run(False)
    logits = tokens * vocab
    assert with_loss.memory.category_max["temp"] == pytest.approx(mb * 6 * logits)
    raw = max(total for _, total, _ in with_loss.memory.samples)
    raw_without = max(total for _, total, _ in without.memory.samples)
    assert raw - raw_without == pytest.approx(mb * 2 * logits, rel=1e-9)
