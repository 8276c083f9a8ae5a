"""experiments.what_if with the levers runs use today (uneven pipeline stages, TP communication
overlap, per-op selective recompute, FP8 recipes, whose saved tensors / cross entropy / ZeRO-3
collectives): each is named in the output, and each bad value is one error line with exit 2."""

from __future__ import annotations

import json

import pytest

from experiments.what_if.cli import main
from tests.goldens import assert_golden

SMALL = [
    "--model", "llama2-7b", "--cluster", "hgx-h100", "--gpus", "8", "--seq-len", "1024",
    "--global-batch", "16", "--micro-batch", "1", "--strategies", "ddp", "--quiet",
]  # fmt: skip


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main([*SMALL, *argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return list(data["records"] if isinstance(data, dict) else data)


def _number(record: dict[str, object], key: str) -> float:
    value = record[key]
    assert isinstance(value, int | float)
    return float(value)


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


def test_uneven_stages_are_named_in_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    records = _json(["--tp", "2", "--pp", "4", "--pp-layers", "7,9,9,7"], capsys)
    assert [r["layout"] for r in records] == ["dp1 tp2 pp4[7,9,9,7]"]
    torchtitan = _json(["--tp", "2", "--pp", "4", "--pp-layers", "torchtitan"], capsys)
    assert [r["layout"] for r in torchtitan] == ["dp1 tp2 pp4[8,9,8,7]"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pp", "4", "--pp-layers", "7,9,9,8"], "sums to 33 blocks; the model has 32"),
        (["--pp", "2,4", "--pp-layers", "16,16"], "needs one --pp value above 1"),
        (["--pp-layers", "16,16"], "needs one --pp value above 1"),
        (["--pp", "4", "--pp-layers", "16,16"], "lists 2 stages"),
    ],
)
def test_bad_stage_lists_get_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _error(argv, capsys)


def test_tp_comm_overlap_lowers_the_exposed_tp_time(capsys: pytest.CaptureFixture[str]) -> None:
    # 4,096 tokens: at 1,024 a TP-8 step of this model is bound by eager dispatch (its GEMMs run
    # shorter than the host takes to launch them), where hiding communication changes nothing
    base = ["--tp", "8", "--sequence-parallel", "--seq-len", "4096"]
    plain = _json(base, capsys)[-1]
    overlapped = _json([*base, "--tp-comm-overlap"], capsys)[-1]
    assert _number(overlapped, "tp_comm_s") < _number(plain, "tp_comm_s")
    assert _number(overlapped, "step_time_s") < _number(plain, "step_time_s")


def test_tp_comm_overlap_without_sequence_parallelism_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "needs --sequence-parallel" in _error(["--tp", "8", "--tp-comm-overlap"], capsys)


def test_fp8_recipes_are_named_and_faster_than_bf16(capsys: pytest.CaptureFixture[str]) -> None:
    plain = ["--strategies", "fsdp"]
    bf16 = _json(plain, capsys)[-1]
    tensorwise = _json([*plain, "--fp8", "tensorwise"], capsys)[-1]
    assert "fp8 matmuls" in str(tensorwise["precision"]) and "fsdp-mp" in str(tensorwise["precision"])
    assert _number(tensorwise, "step_time_s") < _number(bf16, "step_time_s")
    # the fp8 all-gather moves less
    assert _number(tensorwise, "comm_bytes") < _number(bf16, "comm_bytes")
    assert main([*SMALL, "--strategies", "fsdp", "--fp8", "rowwise"]) == 0
    assert "--dtype fp8 (--fp8 rowwise)" in capsys.readouterr().out


def test_selective_op_recompute_sits_between_none_and_full(capsys: pytest.CaptureFixture[str]) -> None:
    # seq 4096: the step is GPU-bound (the reruns are device time; a host-bound layer would hide them)
    times = {
        mode: _number(
            _json(["--strategies", "fsdp", "--seq-len", "4096", "--recompute", mode], capsys)[-1],
            "step_time_s",
        )
        for mode in ("none", "selective-op", "full")
    }
    assert times["none"] < times["selective-op"] < times["full"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "dgx-a100", "--fp8", "tensorwise"], "a100-sxm-80gb has no fp8 tensor cores"),
        (["--dtype", "fp8", "--fp8", "rowwise"], "--dtype fp8 is --fp8 delayed"),
        (["--dtype", "fp16", "--fp8", "rowwise"], "cannot go with it"),
        (["--recompute", "selective-ops"], "allowed: none, selective, selective-op"),
    ],
)
def test_bad_fp8_and_recompute_values_get_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _error(argv, capsys)


def test_the_levers_are_recorded_in_the_header_and_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--tp", "2", "--pp", "2", "--sequence-parallel", "--tp-comm-overlap", "--pp-layers", "15,17"]
    argv += ["--recompute", "selective-op", "--fp8", "tensorwise"]
    assert main([*SMALL, *argv]) == 0
    out = capsys.readouterr().out
    assert (
        "run levers: --fp8 tensorwise, --recompute selective-op, --tp-comm-overlap, --pp-layers 15,17" in out
    )
    assert main([*SMALL, *argv, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["levers"] == {
        "fp8": "tensorwise",
        "recompute": "selective-op",
        "tp_comm_overlap": True,
        "pp_layers": "15,17",
        "saved_tensors": "eager",
        "cross_entropy": "torch",
        "zero3_per_rank_lists": False,
    }
    assert document["records"][-1]["layout"] == "dp2 tp2 pp2[15,17]"
    assert main([*SMALL, "--format", "json"]) == 0
    assert "levers" not in json.loads(capsys.readouterr().out)


def test_parameter_server_modes_are_left_out_under_fp8(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "gpt2-small", "--cluster", "hgx-h100", "--gpus", "2", "--global-batch", "8"]
    assert main([*argv, "--fp8", "rowwise", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "do not model --fp8 rowwise: left out" in captured.err
    assert not [r for r in json.loads(captured.out)["records"] if str(r["strategy"]).startswith("ps-")]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--dtype", "fp8", "--strategies", "ddp,ps-sync"])
    assert exit_info.value.code == 2
    assert "do not model --fp8 delayed: leave them out" in capsys.readouterr().err


def test_levers_table_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    """Every lever at once on one layout: FP8 tensorwise, per-op recompute, TP overlap, uneven stages."""
    argv = ["--tp", "2", "--pp", "4", "--sequence-parallel", "--tp-comm-overlap", "--pp-layers", "torchtitan"]
    assert main([*SMALL, *argv, "--recompute", "selective-op", "--fp8", "tensorwise"]) == 0
    assert_golden("what_if_levers.txt", capsys.readouterr().out)


def _peak(argv: list[str], capsys: pytest.CaptureFixture[str]) -> float:
    return _number(_json(argv, capsys)[-1], "peak_memory_bytes")


@pytest.mark.parametrize(
    "layout", [["--strategies", "fsdp"], ["--strategies", "fsdp", "--tp", "2", "--sequence-parallel"]]
)
def test_megatron_te_saved_tensors_lower_a_llamas_peak(
    layout: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Fused RMSNorm-linear, RoPE and SwiGLU keep less (simcore.compute.saved_tensors): on the
    data-parallel path and a layout alike; the step time is the same kernels' either way."""
    eager = _json(layout, capsys)[-1]
    te = _json([*layout, "--saved-tensors", "megatron-te"], capsys)[-1]
    assert _number(te, "peak_memory_bytes") < _number(eager, "peak_memory_bytes")
    assert _number(te, "step_time_s") == pytest.approx(_number(eager, "step_time_s"), rel=1e-9)
    assert _peak([*layout, "--saved-tensors", "eager"], capsys) == _number(eager, "peak_memory_bytes")


def test_megatron_cross_entropy_lowers_the_peak_where_the_loss_sets_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Llama 3's 128k vocabulary at two sequences of 2048 per micro-batch: the loss's fp32 working
    # tensors (torch: the logits' copy and log-softmax; megatron: one copy, in place) set the peak
    argv = ["--model", "llama3-8b", "--seq-len", "2048", "--micro-batch", "2", "--strategies", "fsdp"]
    assert _peak([*argv, "--cross-entropy", "megatron"], capsys) < _peak(argv, capsys)


def test_zero3_per_rank_lists_slow_zero3_at_many_gpus_and_leave_fsdp_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--gpus", "64", "--global-batch", "64", "--strategies", "zero3,fsdp"]
    flat = {r["strategy"]: _number(r, "step_time_s") for r in _json(argv, capsys)}
    lists = {
        r["strategy"]: _number(r, "step_time_s") for r in _json([*argv, "--zero3-per-rank-lists"], capsys)
    }
    assert lists["zero3"] > 1.5 * flat["zero3"]  # 64 host-built entries per tensor, a sync per fetch
    assert lists["fsdp"] == flat["fsdp"]


def test_the_framework_levers_are_named_in_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--strategies", "zero3", "--saved-tensors", "megatron-te", "--cross-entropy", "megatron"]
    assert main([*SMALL, *argv, "--zero3-per-rank-lists"]) == 0
    out = capsys.readouterr().out
    assert "run levers: --saved-tensors megatron-te, --cross-entropy megatron, --zero3-per-rank-lists" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--saved-tensors", "te"], ["--saved-tensors: invalid choice: 'te'", "eager", "megatron-te"]),
        (["--cross-entropy", "fused"], ["--cross-entropy: invalid choice: 'fused'", "torch", "megatron"]),
        (["--zero3-per-rank-lists", "yes"], ["unrecognized arguments: yes"]),
    ],
)
def test_bad_framework_lever_values_get_one_line(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _error(argv, capsys)
    assert all(word in err for word in words)
