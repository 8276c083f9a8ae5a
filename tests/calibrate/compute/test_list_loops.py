"""The per-rank loop probe behind efficiency.yaml's deepspeed_zero3.per_rank_lists."""

from __future__ import annotations

from calibrate.compute.list_loops import _gather_loop, _reduce_loop, _replicate_loop, per_rank_loop_s


def test_the_loops_build_one_entry_per_rank() -> None:
    import torch

    flat = torch.arange(12.0)
    parts = _gather_loop(flat, 4, 3, 0)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]  # type: ignore[attr-defined]
    assert len(_reduce_loop(flat.view(4, 3), 4, 3, 12)) == 4
    # 10 elements in parts of 3 on 4 ranks: ranks 0-3 start at 0, 3, 6, 9, all below 10
    assert _replicate_loop(parts, torch.zeros(12), 4, 3, 10) == 4
    # 5 elements in parts of 3 on 4 ranks: only ranks 0 and 1 start below 5
    assert _replicate_loop(parts, torch.zeros(12), 4, 3, 5) == 2


def test_the_probe_reports_positive_seconds_per_rank() -> None:
    seconds = per_rank_loop_s(ranks=16, calls=2, repeats=2)
    assert set(seconds) == {"all_gather", "reduce_scatter", "persistent_gather"}
    assert all(0.0 < s < 1e-3 for s in seconds.values())
