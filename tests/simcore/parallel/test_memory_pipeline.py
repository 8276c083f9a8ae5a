"""What a pipelined stage holds across micro-batches: hand counts of the schedules' peaks, each
strategy's held state, invariants of the peak, and the composed step's stage peaks."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simcore.parallel.step as parallel_step
from simcore.compute.memory import MemoryTimeline, runtime_memory
from simcore.parallel import ParallelLayout, simulate_parallel_step
from simcore.parallel.memory_pipeline import (
    HeldState,
    RuntimeHeld,
    held_state,
    pipeline_peak_bytes,
    pipeline_peak_parts,
    pipelined_extra_bytes,
    run_state_bytes,
    stage_runtime_held,
    state_category,
    torch_pipelining_held,
)
from simcore.parallel.options import ParallelOptions
from simcore.parallel.pp import rank_orders
from simcore.parallel.stage import StageModel
from simcore.parallel.step import ParallelStepResult
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt

A, G = 3.0, 5.0  # one micro-batch's activations, the chunk's gradients (bytes, any unit)


def test_1f1b_first_rank_holds_pp_micro_batches_and_the_gradients() -> None:
    """1F1B, pp 4, 8 micro-batches, rank 0: F F F F B F ... ; after the first B (3 in flight and the
    gradients) the next F brings 4 back: peak 4A + G."""
    order = rank_orders("1f1b", 4, 1, 8)[0]
    assert pipeline_peak_bytes(order, [A], HeldState((G,))) == 4 * A + G


def test_1f1b_last_rank_holds_one_micro_batch_and_the_gradients() -> None:
    order = rank_orders("1f1b", 4, 1, 8)[3]
    assert pipeline_peak_bytes(order, [A], HeldState((G,))) == A + G


def test_gpipe_holds_every_micro_batch_before_its_first_backward() -> None:
    """GPipe: m forwards, then backwards: max(mA, (m - 1)A + G)."""
    order = rank_orders("gpipe", 4, 1, 6)[0]
    assert pipeline_peak_bytes(order, [A], HeldState((1.0,))) == 6 * A  # 18 > 5A + 1
    assert pipeline_peak_bytes(order, [A], HeldState((G,))) == 5 * A + G  # 20 > 18


def test_fsdp_gathered_parameters_count_always_or_after_a_backward() -> None:
    """With reshard_after_forward False the gathered parameters P are held from the first forward;
    else only from a backward to the next forward (rank 3 of 1F1B pp 4: F B F B ...: A + G + P
    after every B, then the F reshards them)."""
    order = rank_orders("1f1b", 4, 1, 8)[3]
    always = HeldState((G,), params_always=7.0)
    after = HeldState((G,), params_after_backward=7.0)
    assert pipeline_peak_bytes(order, [A], always) == A + G + 7.0
    assert pipeline_peak_bytes(order, [A], after) == G + 7.0  # after a B nothing is in flight


def test_interleaved_chunks_weigh_their_own_activations() -> None:
    """Interleaved, pp 2, vpp 2, 2 micro-batches, rank 0: warm-up 2 (pp - 1) + (vpp - 1) pp = 4 = all
    chunk forwards (2A + 2 x 2A), then the backwards: peak 2 x (A + 2A) before any B."""
    order = rank_orders("1f1b", 2, 2, 2)[0]
    assert pipeline_peak_bytes(order, [A, 2 * A], HeldState((G, G))) == 6 * A


def test_held_state_of_each_strategy() -> None:
    """DDP/ZeRO-1: full gradients in the grad dtype; ZeRO-2: the shard; FSDP2: unsharded gradients
    in the reduce dtype, gathered parameters always (no reshard after forward) or after backward."""

    def held(stage: int, framework: str, gathered: float = 0.0, reshard: bool = True) -> HeldState:
        return held_state(
            stage, framework, chunk_params=[10.0, 20.0], grad_bytes=2, reduce_bytes=4, shards=5,
            gathered_bytes=gathered, reshard_after_forward=reshard,
        )  # fmt: skip

    assert held(0, "torch-ddp") == HeldState((20.0, 40.0))
    assert held(1, "megatron") == HeldState((20.0, 40.0))
    assert held(2, "deepspeed") == HeldState((4.0, 8.0))
    assert held(3, "deepspeed") == HeldState((4.0, 8.0))
    assert held(3, "torch-fsdp", 60.0, reshard=False) == HeldState((40.0, 80.0), 60.0, 0.0)
    assert held(3, "torch-fsdp", 60.0) == HeldState((40.0, 80.0), 0.0, 60.0)


def test_run_state_and_extra_subtract_what_the_one_micro_batch_run_counted() -> None:
    """The run's state at its peak in its passes; a peak in its tail (the optimizer step) counts none."""
    timeline = MemoryTimeline(capacity_bytes=1e12)
    timeline.apply([("grads", 1.0)], "start", 0.0)
    timeline.apply([("grads", 8.0), ("buffers", 4.0)], "backward", 1.0)
    initial = {"grads": 1.0}
    assert run_state_bytes(timeline, initial, 2.0, 0, "torch-ddp") == 8.0
    assert run_state_bytes(timeline, initial, 2.0, 3, "torch-fsdp") == 12.0
    timeline.apply([("temp", 50.0)], "optimizer step", 3.0)
    assert run_state_bytes(timeline, initial, 2.0, 0, "torch-ddp") == 0.0
    order = rank_orders("1f1b", 4, 1, 8)[0]
    extra = pipelined_extra_bytes(order, [A], HeldState((G,)), run_activations=A, run_state=2.0)
    assert extra == (4 * A - A, G - 2.0)  # peak 4A + G: 3A more activations, G - 2 more state
    assert pipelined_extra_bytes(order, [A], HeldState((G,)), run_activations=A, run_state=99.0) == (
        3 * A,
        0.0,
    )
    assert pipeline_peak_parts(order, [A], HeldState((G,), params_always=1.0)) == (4 * A, G + 1.0)
    assert state_category(3, "torch-fsdp") == "buffers"
    assert state_category(1, "deepspeed") == state_category(0, "torch-ddp") == "grads"


_SCHEDULES = st.sampled_from(["1f1b", "gpipe", "zb-h1"])


@settings(max_examples=60, deadline=None)
@given(
    _SCHEDULES,
    st.integers(1, 6),
    st.integers(1, 12),
    st.floats(0.0, 10.0),
    st.floats(0.0, 10.0),
    st.floats(0.0, 10.0),
)
def test_peak_is_bounded_and_grows_with_micro_batches(
    schedule: str, pp: int, micro: int, a: float, g: float, p: float
) -> None:
    """Nondecreasing in micro-batches; at least the activations' in-flight peak and the gradients
    (plus the parameters held always); at most all of them at once; the first rank holds at least
    what the last one does (1F1B, GPipe: no fewer micro-batches in flight)."""
    held = HeldState((g,), params_always=p)
    orders = rank_orders(schedule, pp, 1, micro)
    more = rank_orders(schedule, pp, 1, micro + 1)
    for rank in range(pp):
        peak = pipeline_peak_bytes(orders[rank], [a], held)
        in_flight = min(micro, pp - rank) if schedule != "gpipe" else micro
        assert peak >= max(in_flight * a, g) + p - 1e-9
        assert peak <= in_flight * a + g + p + 1e-9
        assert pipeline_peak_bytes(more[rank], [a], held) >= peak - 1e-9
    assert pipeline_peak_bytes(orders[0], [a], held) >= pipeline_peak_bytes(orders[-1], [a], held) - 1e-9


def _pipelined(strategy: str, config: TrainingConfig, pp: int = 4, layers: int = 8) -> ParallelStepResult:
    workload = small_gpt(layers, tied=False)
    return simulate_parallel_step(workload, config, cluster("dgx-a100", 8), strategy, ParallelLayout(pp=pp))


def test_fsdp_stages_accumulate_their_unsharded_gradients_in_the_reduce_dtype() -> None:
    """FSDP2 under pipelining keeps each stage's unsharded gradients over the step in the reduce
    dtype: fp32 (``fsdp-mp``) holds 2 bytes per stage parameter more than bf16 (``fsdp-mp-low``),
    with the allocator's fragmentation on them; the one-micro-batch runs are otherwise alike. (The
    last stage peaks as its passes end instead, merging its 32 micro-batches' logits, after the
    gradients are reduced: the stages before it.)"""
    config = TrainingConfig(global_batch=64, micro_batch=1, reshard_after_forward=False)
    fp32 = _pipelined("fsdp", replace(config, precision="fsdp-mp"), layers=16)
    bf16 = _pipelined("fsdp", replace(config, precision="fsdp-mp-low"), layers=16)
    fragmentation = runtime_memory("gpu").fragmentation
    for high, low in zip(fp32.stages[:-1], bf16.stages[:-1], strict=True):
        stage_params = high.memory_breakdown["params"] / 4.0 * 2  # fp32 shards over dp 2
        expected = 2.0 * stage_params * (1 + fragmentation)
        assert high.peak_memory_bytes - low.peak_memory_bytes == pytest.approx(expected, rel=0.01)


def test_more_micro_batches_never_lower_a_pipelined_stage_peak() -> None:
    base = TrainingConfig(global_batch=16, micro_batch=1)
    for strategy in ("ddp", "zero1", "fsdp"):
        few = _pipelined(strategy, base).report.peak_memory_bytes
        many = _pipelined(strategy, replace(base, global_batch=64)).report.peak_memory_bytes
        assert many >= few * (1 - 1e-9), strategy


def test_torch_pipelining_holds_by_stage_role() -> None:
    """torch.distributed.pipelining (torch 2.6): every stage keeps its outputs (the last stage's are
    the logits L); all but the first have forward receive buffers and input gradients; all but the
    last gradient receive buffers (H: the activation passed between stages)."""
    h, logits = 2.0, 7.0
    assert torch_pipelining_held([0], 4, hidden_bytes=[h], last_output_bytes=logits) == RuntimeHeld(
        (h,), (0.0,), (0.0,), (h,)
    )
    assert torch_pipelining_held([1], 4, hidden_bytes=[h], last_output_bytes=logits) == RuntimeHeld(
        (h,), (h,), (h,), (h,)
    )
    assert torch_pipelining_held([3], 4, hidden_bytes=[h], last_output_bytes=logits) == RuntimeHeld(
        (logits,), (h,), (h,), (0.0,), logits
    )
    # interleaved: rank 0's chunks are virtual stages 0 and 4 of 8
    both = torch_pipelining_held([0, 4], 8, hidden_bytes=[h, 3.0], last_output_bytes=logits)
    assert both == RuntimeHeld((h, 3.0), (0.0, 3.0), (0.0, 3.0), (h, 3.0))
    # the last stage merges its outputs (all micro-batches' logits) as the passes end
    last = torch_pipelining_held([3, 7], 8, hidden_bytes=[h, h], last_output_bytes=logits)
    assert last.merged == logits and last.merge_bytes(8) == 8 * logits and both.merge_bytes(8) == 0.0


def test_runtime_held_after_some_passes_hand_count() -> None:
    """5 forwards and 2 backwards of 8 micro-batches: 5 outputs, 2 input gradients, the receive
    buffers of the 8 - 3 micro-batches not in flight, all 8 gradient receive buffers."""
    held = RuntimeHeld((1.0,), (10.0,), (100.0,), (1000.0,))
    assert held.at([5], [2], 8) == 5 * 1.0 + 2 * 10.0 + 5 * 100.0 + 8 * 1000.0
    # once the passes end: every output and input gradient, every receive buffer (none in flight)
    assert held.after_step(8) == 8 * 1.0 + 8 * 10.0 + 8 * 100.0 + 8 * 1000.0


def test_last_stage_peak_with_the_runtime_hand_count() -> None:
    """1F1B, pp 2, 4 micro-batches, rank 1 (the last stage): F0 B0 F1 B1 F2 B2 F3 B3. After F3:
    A in flight, 4 outputs L, 3 input gradients H, 3 idle receive buffers H, gradients G:
    A + 4L + 6H + G = 34 (after B3: 4L + 8H + G = 33)."""
    a, logits, h, g = 3.0, 5.0, 1.0, 5.0
    order = rank_orders("1f1b", 2, 1, 4)[1]
    runtime = torch_pipelining_held([1], 2, hidden_bytes=[h], last_output_bytes=logits)
    assert pipeline_peak_parts(order, [a], HeldState((g,)), runtime) == (a + 4 * logits + 6 * h, g)
    assert pipeline_peak_bytes(order, [a], HeldState((g,))) == a + g  # without the runtime


def _stage(layers: list[tuple[str, int, float]], chunks: list[range], rank: int) -> StageModel:
    workload = SimpleNamespace(
        layers=[SimpleNamespace(name=n, block=b, output_bytes=o) for n, b, o in layers]
    )
    return cast(StageModel, SimpleNamespace(workload=workload, chunk_slices=tuple(chunks), rank=rank))


def test_stage_runtime_held_reads_block_outputs_and_the_logits() -> None:
    """A last rank of pp 2: its chunk's block output (per sample 3) is the activation passed in, the
    output head's logits (per sample 11) its output; micro-batches of 4 samples."""
    model = _stage(
        [("block1.norm", 0, 9.0), ("block1.residual", 0, 3.0), ("final_norm", -1, 3.0),
         ("lm_head", -1, 11.0), ("loss", -1, 0.0)],
        [range(5)], rank=1,
    )  # fmt: skip
    assert stage_runtime_held(model, 2, 1, 4) == RuntimeHeld((44.0,), (12.0,), (12.0,), (0.0,), 44.0)
    first = _stage([("embed", -1, 3.0), ("block0.residual", 0, 3.0)], [range(2)], rank=0)
    assert stage_runtime_held(first, 2, 1, 4) == RuntimeHeld((12.0,), (0.0,), (0.0,), (12.0,))


def test_only_fsdp2_pipelines_hold_the_torch_runtime_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2 (torch.distributed.pipelining) stages peak higher with the runtime's buffers; DDP's
    (Megatron's schedule) do not change when they are switched off."""
    config = TrainingConfig(global_batch=16, micro_batch=1)
    with_fsdp = [s.peak_memory_bytes for s in _pipelined("fsdp", config, pp=2).stages]
    with_ddp = [s.peak_memory_bytes for s in _pipelined("ddp", config, pp=2).stages]
    empty = RuntimeHeld((0.0,), (0.0,), (0.0,), (0.0,))
    monkeypatch.setattr(parallel_step, "stage_runtime_held", lambda *args: empty)
    without_fsdp = [s.peak_memory_bytes for s in _pipelined("fsdp", config, pp=2).stages]
    without_ddp = [s.peak_memory_bytes for s in _pipelined("ddp", config, pp=2).stages]
    assert all(w > wo for w, wo in zip(with_fsdp, without_fsdp, strict=True))
    assert with_ddp == without_ddp


def test_a_stage_peak_after_the_passes_counts_what_the_runtime_still_holds() -> None:
    """A run of 10 bytes in its passes (to t = 1) and 20 in its optimizer step: with 5 bytes the
    runtime keeps past the passes the stage peaks at 20 + 5 = 25 (no fragmentation); 4 more in
    flight during the passes (10 + 4 < 25) change nothing; what the last stage's merge makes as
    the passes end counts beside the 10 held then."""
    timeline = MemoryTimeline(capacity_bytes=1e12)
    timeline.apply([("activations", 10.0)], "backward", 0.5)
    timeline.apply([("activations", -10.0), ("temp", 20.0)], "optimizer step", 2.0)
    run = SimpleNamespace(
        result=SimpleNamespace(run=SimpleNamespace(memory=timeline)),
        last_backward_s=1.0,
        offload=SimpleNamespace(memory_delta={}),
    )
    peak = cast(Any, parallel_step)._stage_peak
    assert peak(run, 4.0, {}, 5.0)[0] == 25.0
    assert peak(run, 4.0, {}, 0.0)[0] == 20.0
    # 12 made as the passes end, beside the 10 held then: 10 + 12 + 5 = 27 > 20 + 5
    assert peak(run, 4.0, {}, 5.0, 12.0)[0] == 27.0
    assert peak(run, 4.0, {}, 5.0, 12.0)[2].startswith("end of the pipeline's passes")
    assert peak(run, 4.0, {}, 5.0, 6.0)[0] == 25.0  # 10 + 6 + 5 < 25


def test_the_first_stage_holds_every_output_and_gradient_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full recompute, pp 4, 32 micro-batches of one sample: at its last backward (and on through
    the optimizer step, whose phase the run's peak is in) the first stage still holds its 32 outputs
    and 32 gradient receive buffers, one block output each (seq 512 x hidden 512 x 2 bytes), with
    the allocator's fragmentation on them: the peak rises by exactly that."""
    config = TrainingConfig(global_batch=64, micro_batch=1)
    options = ParallelOptions(recompute="full")

    def first_stage() -> tuple[float, str]:
        result = simulate_parallel_step(
            small_gpt(8, tied=False), config, cluster("dgx-a100", 8), "fsdp", ParallelLayout(pp=4), options
        )
        return result.stages[0].peak_memory_bytes, result.stages[0].peak_phase

    with_runtime, phase = first_stage()
    empty = RuntimeHeld((0.0,), (0.0,), (0.0,), (0.0,))
    monkeypatch.setattr(parallel_step, "stage_runtime_held", lambda *args: empty)
    without, _ = first_stage()
    assert phase == "optimizer step"
    block_output = 512 * 512 * 2.0
    expected = 32 * 2 * block_output * (1 + runtime_memory("gpu").fragmentation)
    assert with_runtime - without == pytest.approx(expected, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    _SCHEDULES,
    st.integers(1, 6),
    st.integers(1, 12),
    st.floats(0.0, 10.0),
    st.lists(st.floats(0.0, 10.0), min_size=4, max_size=4),
)
def test_the_runtime_never_lowers_a_peak_and_adds_at_most_all_of_it(
    schedule: str, pp: int, micro: int, a: float, sizes: list[float]
) -> None:
    """What the runtime holds only adds to a boundary: the peak with it is at least the peak
    without, and at most that plus every output, input gradient and buffer of the step at once."""
    runtime = RuntimeHeld(*((s,) for s in sizes))
    held = HeldState((1.0,))
    for order in rank_orders(schedule, pp, 1, micro):
        without = pipeline_peak_bytes(order, [a], held)
        with_runtime = pipeline_peak_bytes(order, [a], held, runtime)
        assert without - 1e-9 <= with_runtime <= without + micro * sum(sizes) + 1e-9
