"""Both evaluators price a power-capped, rank-spread step alike (the rules live in the device the
compute model is built on and in the shared optimizer step, not in either path)."""

from __future__ import annotations

import pytest

from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from tests.simcore.fastpath.test_fast_vs_des import _close, _what_if


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "zero1"])
def test_fast_and_des_agree_under_a_power_cap(strategy: str) -> None:
    workload = load_workload("gpt2-small", seq_len=512)
    base = TrainingConfig(global_batch=16, micro_batch=2, seq_len=512)
    capped = TrainingConfig(global_batch=16, micro_batch=2, seq_len=512, power_limit_w=450)
    runs = {path: _what_if(workload, "hgx-h100", 8, [strategy], capped, path) for path in ("des", "fast")}
    for des, fast in zip(runs["des"].reports, runs["fast"].reports, strict=True):
        _close(des, fast)
    default = _what_if(workload, "hgx-h100", 8, [strategy], base, "fast").reports[-1]
    assert default is not None and runs["fast"].reports[-1] is not None
    assert runs["fast"].reports[-1].compute_s > default.compute_s
