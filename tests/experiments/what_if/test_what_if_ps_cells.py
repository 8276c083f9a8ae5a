"""The what-if's parameter-server rows: each table cell is its detail line's figure; the time estimate."""

from __future__ import annotations

import re

import pytest

from experiments.what_if.cli import (
    MAX_PS_SECONDS,
    NOTE_PS_SECONDS,
    PS_GROWTH_EXPONENT,
    PS_RECOMPUTE_SECONDS_PER_STEP_AT_64,
    PS_SECONDS_PER_STEP_AT_64,
    main,
    ps_seconds,
)
from simcore.whatif.sweep import DEFAULT_CONFIG, MIN_PS_STEPS, UNEVEN_PS_STEPS

_ROW = re.compile(r"^  (ps-\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s")
_DETAIL = re.compile(r"^    (ps-\w+)\s+staleness .*?; ([\d.]+) samples/s over (\d+) gradients")


def test_each_ps_row_says_the_samples_per_s_of_its_detail_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Behind a straggler with a bound (the issue's case: a row at 47.1 where its line said 48.7)."""
    argv = ["--gpus", "8", "--cluster", "g5.12xlarge", "--model", "gpt2-small", "--seq-len", "128",
            "--global-batch", "32", "--strategies", "ps-sync,ps-ssp,ps-async", "--straggler", "0:2",
            "--staleness-bound", "2", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {m[1]: (float(m[3]), float(m[5])) for m in map(_ROW.match, lines) if m}
    details = {m[1]: float(m[2]) for m in map(_DETAIL.match, lines) if m}
    assert rows.keys() == details.keys() == {"ps-sync", "ps-ssp", "ps-async"}
    for mode, (step_s, samples_per_s) in rows.items():
        assert samples_per_s == details[mode], mode
        assert step_s == pytest.approx(32 / samples_per_s, rel=2e-3, abs=1e-3), mode  # step = batch / rate


def test_the_ps_time_estimate_is_the_two_part_curve_and_flags_long_runs() -> None:
    per_step_64 = PS_SECONDS_PER_STEP_AT_64 + PS_RECOMPUTE_SECONDS_PER_STEP_AT_64
    one_gpu = PS_SECONDS_PER_STEP_AT_64 / 64**2 + PS_RECOMPUTE_SECONDS_PER_STEP_AT_64 / 64**PS_GROWTH_EXPONENT
    # Llama-2-7B at 64 GPUs behind a straggler, ps-async on two clusters: 8 steps (145 s measured)
    long_run = ps_seconds(DEFAULT_CONFIG, [64], 1, 2, uneven=True)
    assert long_run == pytest.approx(2 * UNEVEN_PS_STEPS * (per_step_64 + one_gpu))
    assert NOTE_PS_SECONDS < long_run < MAX_PS_SECONDS  # it runs, and says roughly how long
    # the default what-if (16 GPUs, 4 modes, 2 clusters) needs no note; 128 GPUs with 4 modes is refused
    assert ps_seconds(DEFAULT_CONFIG, [16], 4, 2, uneven=False) < NOTE_PS_SECONDS
    assert ps_seconds(DEFAULT_CONFIG, [128], 4, 2, uneven=False) > MAX_PS_SECONDS
    assert MIN_PS_STEPS <= UNEVEN_PS_STEPS
