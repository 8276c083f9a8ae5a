"""Megatron-LM 2021's blocking pipeline sends (``ParallelOptions.p2p_blocking``): a pass that sends
to another rank holds that rank for the send time (``megatron/p2p_communication.py`` at v2.5:
``batch_isend_irecv``, ``req.wait()``, ``torch.cuda.synchronize()``)."""

from __future__ import annotations

import pytest

from simcore.errors import TrainsimError
from simcore.parallel import ParallelOptions
from simcore.parallel.pp import StageTimes, rank_orders, run_pipeline


def _gpipe(blocking: bool) -> float:
    orders = rank_orders("gpipe", 2, 1, 2)
    times = [[StageTimes(1.0, 2.0)], [StageTimes(1.0, 2.0)]]
    return run_pipeline(orders, times, lambda a, b: 0.5, blocking_sends=blocking).makespan_s


def test_blocking_sends_by_hand() -> None:
    """GPipe, 2 ranks, 2 micro-batches, F = 1 s, B = 2 s, sends 0.5 s. Asynchronous: rank 0 F0 [0, 1],
    F1 [1, 2]; rank 1 F0 [1.5, 2.5], F1 [2.5, 3.5], B0 [3.5, 5.5], B1 [5.5, 7.5]; rank 0 B0 [6, 8],
    B1 [8, 10]: 10 s. Blocking: rank 0 sends F0 until 1.5, F1 [1.5, 2.5]; rank 1 F0 [1.5, 2.5], F1
    waits for rank 0's F1, [3, 4], B0 [4, 6], sends until 6.5, B1 [6.5, 8.5]; rank 0 B0 [6.5, 8.5],
    B1 [9, 11]: 11 s."""
    assert _gpipe(False) == pytest.approx(10.0)
    assert _gpipe(True) == pytest.approx(11.0)


def test_without_sends_blocking_changes_nothing() -> None:
    orders = rank_orders("1f1b", 4, 2, 8)
    times = [[StageTimes(0.5, 1.0)] * 2 for _ in range(4)]
    free = run_pipeline(orders, times, lambda a, b: 0.0).makespan_s
    assert run_pipeline(orders, times, lambda a, b: 0.0, blocking_sends=True).makespan_s == free


def test_blocking_sends_are_off_by_default_and_refused_with_zero_bubble() -> None:
    assert ParallelOptions().p2p_blocking is False
    with pytest.raises(TrainsimError, match="not zb-h1"):
        ParallelOptions(schedule="zb-h1", p2p_blocking=True)
