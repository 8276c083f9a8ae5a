"""experiments.what_if with parallel layouts: the table and JSON with layout fields, the
recommendation over layouts, per-stage trace lanes, and one error line per broken rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.what_if.cli import main
from simcore.report import RECORD_FIELDS
from tests.goldens import assert_golden

SMALL = [
    "--model",
    "llama2-7b",
    "--cluster",
    "dgx-a100",
    "--gpus",
    "16",
    "--seq-len",
    "1024",
    "--global-batch",
    "32",
    "--micro-batch",
    "1",
    "--strategies",
    "ddp,zero1",
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_layout_sweep_table_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run([*SMALL, "--tp", "1,2", "--pp", "1,2"], capsys)
    assert_golden("what_if_layouts.txt", out)
    assert "zero1 dp4 tp2 pp2" in out and "stage peaks GiB ddp dp8 pp2 (16)" in out
    assert out.count("recommendation:") == 1


def test_layout_json_adds_fields_and_keeps_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(_run([*SMALL, "--tp", "2", "--pp", "2", "--vpp", "2", "--format", "json"], capsys))
    records = document["records"]
    assert [r["strategy"] for r in records] == ["ddp", "zero1"]
    for record in records:
        assert list(record)[: len(RECORD_FIELDS)] == list(RECORD_FIELDS)
        assert record["layout"] == "dp4 tp2 pp2 vpp2" and record["microbatches"] == 8
        assert len(record["stage_peak_memory_bytes"]) == 2 and record["pipeline_bubble_fraction"] > 0
        assert record["peak_memory_bytes"] == max(record["stage_peak_memory_bytes"])
        assert record["tp_comm_s"] > 0 and record["p2p_comm_s"] > 0
    assert document["recommendations"][0]["strategy"].endswith("dp4 tp2 pp2 vpp2")


def test_recompute_alone_is_todays_activation_checkpointing(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "--model",
        "gpt2-small",
        "--cluster",
        "dgx-a100",
        "--gpus",
        "2",
        "--global-batch",
        "8",
        "--strategies",
        "ddp,fsdp",
        "--format",
        "json",
    ]
    old = json.loads(_run([*base, "--checkpoint-activations"], capsys))["records"]
    new = json.loads(_run([*base, "--recompute", "full"], capsys))["records"]
    for a, b in zip(old, new, strict=True):
        for key in ("step_time_s", "peak_memory_bytes", "compute_s", "scaling_efficiency"):
            assert a[key] == b[key]


@pytest.mark.slow
def test_out_writes_a_trace_lane_per_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run([*SMALL, "--pp", "4", "--strategies", "ddp", "--out", str(tmp_path)], capsys)
    trace = json.loads((tmp_path / "step_trace.json").read_text())
    lanes = {e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
    assert {"stage0/compute", "stage3/compute"} <= lanes
    assert (tmp_path / "memory.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "3", "--gpus", "12"], "attention heads (32) are not divisible by tp (3)"),
        (["--tp", "8", "--pp", "3"], "tp x pp x cp = 8 x 3 x 1 = 24 does not divide 16 GPUs"),
        (["--pp", "16", "--vpp", "4"], "layers (32) are fewer than pp x vpp = 16 x 4 = 64 pipeline stages"),
        (["--ep", "2"], "ep 2 needs a mixture-of-experts model"),
        (["--recompute", "every-0"], "recompute 'every-0' not understood"),
        (["--tp", "two"], "--tp: expected a number"),
        (["--pp", "2", "--strategies", "ddp,ps-async"], "'ps-async' is not one of them"),
        (["--pp", "2", "--straggler", "3:2"], "not supported with parallel layouts"),
        (["--expert-load", "0.5", "--tp", "2"], "--expert-load: 0.5 is out of range; allowed 1..1024"),
        (
            ["--cp", "2", "--ring-kv", "all"],
            "--ring-kv: invalid choice: 'all' (choose from 'grouped', 'repeated')",
        ),
    ],
)
def test_bad_layouts_get_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_ring_kv_repeated_moves_every_query_head(capsys: pytest.CaptureFixture[str]) -> None:
    """--ring-kv reaches the step: llama3-8b's 32 query heads over 8 kv heads, so a repeated ring
    (torchtitan's llama) moves 4x the key/value bytes of a grouped one (Transformer Engine)."""
    argv = [*SMALL, "--model", "llama3-8b", "--seq-len", "8192", "--global-batch", "16",
            "--strategies", "fsdp", "--cp", "2", "--format", "json"]  # fmt: skip
    grouped, repeated, default = (
        json.loads(_run([*argv, *kv], capsys))["records"][0]
        for kv in (["--ring-kv", "grouped"], ["--ring-kv", "repeated"], [])
    )
    assert default["step_time_s"] == grouped["step_time_s"]
    assert repeated["cp_comm_s"] > grouped["cp_comm_s"]
    assert repeated["step_time_s"] > grouped["step_time_s"]
