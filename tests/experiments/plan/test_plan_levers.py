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


def _best(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    document = json.loads(_run([*argv, "--format", "json", "--top", "1"], capsys))
    return dict(document["gpu_counts"][0]["ranked"][0])


# Llama 3 8B on FSDP at two sequences of 2048 per micro-batch: activations and the loss matter.
LLAMA = ["--model", "llama3-8b", "--cluster", "hgx-h100", "--gpus", "8", "--global-batch", "16",
         "--seq-len", "2048", "--strategies", "fsdp", "--micro-batches", "2", "--max-tp", "1", "--max-pp", "1",
         "--recompute", "none", "--quiet"]  # fmt: skip


@pytest.mark.parametrize("lever", [["--saved-tensors", "megatron-te"], ["--cross-entropy", "megatron"]])
def test_megatron_kernels_lower_the_planned_peak(
    lever: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    plain, fused = _best(LLAMA, capsys), _best([*LLAMA, *lever], capsys)
    assert float(str(fused["peak_memory_bytes"])) < float(str(plain["peak_memory_bytes"]))


def test_zero3_per_rank_lists_slow_the_planned_zero3_and_not_fsdp(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "llama2-7b", "--cluster", "hgx-h100", "--gpus", "64", "--global-batch", "64",
            "--seq-len", "1024", "--micro-batches", "1", "--max-tp", "1", "--max-pp", "1", "--recompute", "none",
            "--strategies", "zero3,fsdp", "--format", "json", "--top", "10", "--quiet"]  # fmt: skip

    def steps(extra: list[str]) -> dict[str, float]:
        ranked = json.loads(_run([*argv, *extra], capsys))["gpu_counts"][0]["ranked"]
        return {str(r["strategy"]): float(r["step_time_s"]) for r in reversed(ranked)}  # the best kept

    flat, lists = steps([]), steps(["--zero3-per-rank-lists"])
    assert lists["zero3"] > 1.5 * flat["zero3"]  # 64 host-built entries per tensor, a sync per fetch
    assert lists["fsdp"] == flat["fsdp"]


def test_a_bad_framework_lever_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, "--saved-tensors", "fused"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--saved-tensors: invalid choice: 'fused'" in err and err.count("\n") == 1
