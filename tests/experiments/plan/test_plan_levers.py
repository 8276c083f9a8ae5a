"""experiments.plan with the run levers: --tp-comm-overlap and --fp8 reach the search and are named
in the header and the layout labels; --recompute selective-op is searched; bad values are one line."""

from __future__ import annotations

import json

import pytest

from experiments.plan.cli import main

BASE = ["--model", "gpt2-small", "--cluster", "hgx-h100", "--gpus", "8", "--global-batch", "64",
        "--strategies", "ddp", "--micro-batches", "4", "--quiet"]  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_tp_comm_overlap_reaches_the_search_and_the_labels(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run([*BASE, "--max-tp", "2", "--tp", "2", "--tp-comm-overlap", "--format", "json"], capsys)
    document = json.loads(out)
    assert document["search"]["tp_comm_overlap"] is True and document["search"]["fp8"] == "none"
    layouts = [r["layout"] for count in document["gpu_counts"] for r in count["ranked"]]
    assert layouts and all(lay["tp_comm_overlap"] for lay in layouts)
    assert all("tp-overlap" in lay["label"] for lay in layouts)


def test_fp8_and_selective_op_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run([*BASE, "--fp8", "tensorwise", "--recompute", "selective-op"], capsys)
    assert "fp8 tensorwise linears" in out and "recompute selective-op" in out


def test_fp8_on_a_device_without_it_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, "--cluster", "dgx-a100", "--fp8", "rowwise"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "has no fp8 tensor cores" in err and err.count("\n") == 1


def test_a_power_limit_slows_the_plan_and_a_device_without_it_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def step_s(argv: list[str]) -> float:
        document = json.loads(_run([*BASE, *argv, "--format", "json"], capsys))
        return float(document["gpu_counts"][0]["ranked"][0]["step_time_s"])

    assert step_s(["--power-limit", "400"]) > step_s([])
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, "--cluster", "dgx-a100", "--power-limit", "300"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'a100-sxm-80gb' has no power data" in err and err.count("\n") == 1


def test_no_rank_spread_prices_every_gpu_at_the_median(capsys: pytest.CaptureFixture[str]) -> None:
    def step_s(argv: list[str]) -> float:
        document = json.loads(_run([*BASE, *argv, "--format", "json"], capsys))
        return float(document["gpu_counts"][0]["ranked"][0]["step_time_s"])

    assert step_s(["--no-rank-spread"]) < step_s([])
