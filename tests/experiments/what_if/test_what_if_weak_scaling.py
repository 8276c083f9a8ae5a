"""Weak scaling (``--batch-per-gpu``): the one-GPU baseline runs the per-GPU batch."""

from __future__ import annotations

import pytest

from experiments.what_if.cli import main


def test_a_weak_scaling_what_if_above_one_is_printed_not_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """HSDP of Llama-2-7B on 16 GPUs at 2 samples per GPU: the one-GPU baseline runs AdamW over all
    6.7 B parameters every 2 samples, each of the 16 ranks over 1/16 of them (an earlier build
    stopped this with 'internal error: ... scaling_efficiency 1.03 > 1')."""
    argv = ["--model", "llama2-7b", "--cluster", "a100-roce-400g", "--gpus", "16", "--strategies", "hsdp",
            "--micro-batch", "2", "--batch-per-gpu", "2", "--seq-len", "4096", "--dtype", "bf16",
            "--precision", "fsdp-mp-low"]  # fmt: skip
    assert main(argv) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("hsdp"))
    assert float(row.split()[6].rstrip("*")) > 1.0
