"""Pipeline point-to-point sends in both directions, counted by hand.

Per micro-batch and stage boundary the forward sends the activations downstream and the backward
sends their gradients upstream (Narayanan et al. 2021, sec. 2.2; Megatron-LM ``p2p_communication``),
``micro_batch x seq x hidden x dtype bytes`` each (one hidden state per token).

GPipe on two stages with forward and backward pass times f and b, forward send time c_f and
backward send time c_b, m micro-batches: stage 1's forwards follow stage 0's one send behind, its
backwards run as soon as its forwards are done, and stage 0's backwards follow one send behind them:
the step takes ``(m + 1)(f + b) + c_f + c_b``.
"""

from __future__ import annotations

import pytest

from simcore.collectives import collective_time
from simcore.parallel import ParallelLayout, simulate_parallel_step
from simcore.parallel.pp import PipelineOp, StageTimes, rank_orders, run_pipeline
from simcore.parallel.step import ParallelStepResult
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt

F, B, C_FWD, C_BWD = 1.0, 2.0, 0.25, 0.125


def _send(src: int, dst: int) -> float:
    return C_FWD if dst > src else C_BWD  # downstream: activations; upstream: their gradients


@pytest.mark.parametrize("micro", [1, 2, 4, 7])
def test_gpipe_on_two_stages_pays_one_send_each_way(micro: int) -> None:
    run = run_pipeline(rank_orders("gpipe", 2, 1, micro), [[StageTimes(F, B)]] * 2, _send)
    assert run.makespan_s == pytest.approx((micro + 1) * (F + B) + C_FWD + C_BWD, rel=1e-12)


def test_1f1b_on_two_stages_by_hand() -> None:
    """Two micro-batches: stage 0 F0 [0, f], F1 [f, 2f]; stage 1 F0 from f + c_f, B0, F1, B1 back to
    back until 3f + c_f + 2b; stage 0 B0 from 2f + c_f + b + c_b, B1 from 3f + c_f + 2b + c_b."""
    run = run_pipeline(rank_orders("1f1b", 2, 1, 2), [[StageTimes(F, B)]] * 2, _send)
    starts = {(rank, op.kind, op.micro): start for rank, op, start, _ in run.spans}
    assert starts[(1, "F", 0)] == pytest.approx(F + C_FWD)
    assert starts[(0, "B", 0)] == pytest.approx(2 * F + C_FWD + B + C_BWD)
    assert starts[(0, "B", 1)] == pytest.approx(3 * F + C_FWD + 2 * B + C_BWD)
    assert run.makespan_s == pytest.approx(3 * F + 3 * B + C_FWD + C_BWD)


MICRO = 4


@pytest.fixture(scope="module")
def pp2() -> tuple[ParallelStepResult, float]:
    """A 4-block GPT (hidden 512, sequence 512, bf16) on two A100s, pp = 2, four micro-batches."""
    workload, topology = small_gpt(4), cluster("dgx-a100", 2)
    config = TrainingConfig(global_batch=MICRO, micro_batch=1)
    result = simulate_parallel_step(workload, config, topology, "ddp", ParallelLayout(pp=2))
    send_bytes = 1 * 512 * 512 * 2  # micro-batch x seq x hidden x bf16
    send_s = collective_time(topology, "send_recv", send_bytes, (0, 1)).time_s
    return result, send_s


def test_a_pp2_step_counts_a_forward_and_a_backward_send_per_micro_batch(
    pp2: tuple[ParallelStepResult, float],
) -> None:
    result, send_s = pp2
    assert send_s > 0
    assert result.report.p2p_comm_s == pytest.approx(2 * MICRO * send_s, rel=1e-9)


def test_a_pp2_step_waits_for_the_sends_both_ways(pp2: tuple[ParallelStepResult, float]) -> None:
    """Stage 1's first forward starts one send after stage 0's ends; stage 0's first backward one
    send after stage 1's (stage 0 is idle then, waiting for it)."""
    result, send_s = pp2
    pipeline = result.pipeline
    assert pipeline is not None
    ends = {(rank, op): end for rank, op, _, end in pipeline.spans}
    starts = {(rank, op): start for rank, op, start, _ in pipeline.spans}
    f0, b0 = PipelineOp("F", 0, 0), PipelineOp("B", 0, 0)
    assert starts[(1, f0)] == pytest.approx(ends[(0, f0)] + send_s, rel=1e-12)
    assert starts[(0, b0)] == pytest.approx(ends[(1, b0)] + send_s, rel=1e-12)
