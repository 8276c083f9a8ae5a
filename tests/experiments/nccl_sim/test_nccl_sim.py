"""``python -m experiments.nccl_sim``: golden nccl-tests tables, the JSON records, bad input.

Regenerate the golden files with ``TRAINSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_nccl_sim.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.nccl_sim.cli import main, size_ladder
from tests.goldens import assert_golden

CASES = {
    "nccl_sim_dgx-a100_8.txt": [
        "--topology",
        "dgx-a100",
        "--gpus",
        "8",
        "--op",
        "all_reduce",
        "-b",
        "8",
        "-e",
        "1G",
        "-f",
        "2",
    ],
    "nccl_sim_dgx-a100_2nodes.txt": [
        "--topology",
        "dgx-a100",
        "--nodes",
        "2",
        "--op",
        "all_reduce",
        "-b",
        "1K",
        "-e",
        "1G",
        "-f",
        "4",
    ],
    "nccl_sim_g5.12xlarge_all_gather.json": (
        [
            "--topology",
            "g5.12xlarge",
            "--op",
            "all_gather",
            "-b",
            "1M",
            "-e",
            "256M",
            "-f",
            "4",
            "--format",
            "json",
        ]
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_matches_golden(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(CASES[name]) == 0
    assert_golden(name, capsys.readouterr().out)


def test_table_has_nccl_tests_columns_and_busbw_factor(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--topology", "dgx-a100", "--gpus", "8", "-b", "1G", "-e", "1G"])
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "#wrong" in line)
    assert header.split() == [
        "#",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    row = next(line for line in lines if not line.startswith("#")).split()
    size, count, dtype, redop, root, time_us, algbw, busbw, wrong = row[:9]
    assert (int(size), int(count), int(root)) == (1 << 30, (1 << 30) // 4, -1)
    assert (dtype, redop, wrong) == ("float", "sum", "N/A")
    assert float(algbw) == pytest.approx((1 << 30) / float(time_us) / 1e3, rel=0.01)
    assert float(busbw) == pytest.approx(float(algbw) * 2 * 7 / 8, abs=0.02)
    assert row[5:9] == row[9:13]  # in-place repeats the simulated numbers
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)


def test_json_records_carry_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "--topology",
            "dgx-a100",
            "--gpus",
            "8",
            "--op",
            "reduce_scatter",
            "-b",
            "1M",
            "-e",
            "4M",
            "-f",
            "2",
            "--format",
            "json",
            "--algo",
            "direct",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "trainsim-nccl-sim" and doc["ranks"] == 8
    assert [r["size_bytes"] for r in doc["results"]] == [1 << 20, 1 << 21, 1 << 22]
    for r in doc["results"]:
        assert set(r) >= {
            "size_bytes",
            "count",
            "type",
            "time_us",
            "algbw_GBps",
            "busbw_GBps",
            "algorithm",
            "protocol",
            "bottleneck_link",
            "bottleneck",
        }
        assert r["algorithm"] == "direct" and r["count"] == r["size_bytes"] // 4 // 8
        assert r["bottleneck"]["kind"] == "nvswitch" and r["bottleneck"]["usable_GBps"] == pytest.approx(
            240.0
        )
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 7 / 8)


def test_per_step_mode_prints_the_same_times_for_a_small_group(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--topology", "dgx-a100", "--gpus", "8", "-b", "1K", "-e", "1M", "-f", "32", "--format", "json"]
    main(args)
    aggregate = json.loads(capsys.readouterr().out)["results"]
    main([*args, "--mode", "per-step"])
    per_step = json.loads(capsys.readouterr().out)["results"]
    for a, b in zip(aggregate, per_step, strict=True):
        assert b["time_us"] == pytest.approx(a["time_us"], rel=0.01)


def test_size_ladder_follows_nccl_tests() -> None:
    assert size_ladder(8, 64, 2, 0) == [8, 16, 32, 64]
    assert size_ladder(1 << 20, 3 << 20, 1, 1 << 20) == [1 << 20, 2 << 20, 3 << 20]
    assert size_ladder(32, 32, 1, 1 << 20) == [32]


@pytest.mark.parametrize(
    "args, message",
    [
        (["-b", "-8"], "size"),
        (["-b", "1G", "-e", "8"], "larger than"),
        (["--op", "alltoall"], "--op: invalid choice: 'alltoall'"),
        (["--algo", "nvls"], "nvls"),
        (["--algo", "warp"], "allowed: ring"),
        (["--proto", "LL256"], "--proto 'LL256' is not a protocol; allowed: LL, LL128, Simple"),
        (["--algo", "nvls", "--topology", "hgx-h100", "--proto", "LL"], "protocol LL cannot run nvls"),
        (["--op", "all_gather", "--algo", "tree"], "does not implement all_gather"),
        (["--op", "all_to_allv", "--skew", "-1"], "--skew"),
        (["--topology", "no-such-cluster"], "no-such-cluster"),
        (["--cluster", "no-such-cluster"], "no-such-cluster"),
        (["--gpus", "100000"], "--gpus: 100000 is out of range; allowed 1..32768"),
        (["-b", "8", "-e", "1G", "-f", "1", "-i", "1"], "gives 1073741817 sizes; at most 1024"),
        (["-e", "2000000G"], "larger than"),
        (["--gpus", "0"], "--gpus"),
        (["--format", "xml"], "--format"),
        (["--mode", "fast"], "--mode"),
        (["--op", "broadcast", "--root", "9"], "--root"),
        (["--no-such-flag"], "unrecognized"),
    ],
)
def test_bad_input_prints_one_error_line_and_exits_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["-b", "1K", "-e", "1K", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


@pytest.mark.parametrize(
    "env, message",
    [
        ({"NCCL_ALGO": "warp"}, "NCCL_ALGO='warp': unknown 'warp'"),
        ({"NCCL_PROTO": "LL,fast"}, "NCCL_PROTO='LL,fast': unknown 'fast'"),
        ({"NCCL_COLLNET_ENABLE": "on"}, "NCCL_COLLNET_ENABLE='on' is not allowed"),
        ({"NCCL_ALGO": "allreduce:ring"}, "per-collective lists"),
    ],
)
def test_bad_nccl_environment_prints_one_error_line_and_exits_2(
    env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exc:
        main(["-b", "1K", "-e", "1K"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_nccl_environment_and_flags_pick_algorithm_and_protocol(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["--topology", "dgx-a100", "--nodes", "2", "-b", "8", "-e", "8", "--format", "json"]
    main(base)
    (auto,) = json.loads(capsys.readouterr().out)["results"]
    assert (auto["algorithm"], auto["protocol"]) == ("tree", "LL")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("NCCL_PROTO", "^LL")
    main(base)
    (ring,) = json.loads(capsys.readouterr().out)["results"]
    assert (ring["algorithm"], ring["protocol"]) == ("ring", "LL128")
    main([*base, "--algo", "Tree", "--proto", "simple"])
    (pinned,) = json.loads(capsys.readouterr().out)["results"]
    assert (pinned["algorithm"], pinned["protocol"]) == ("tree", "Simple")


def test_all_to_all_and_all_to_allv_run(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--topology", "dgx-a100", "--nodes", "2", "-b", "64M", "-e", "64M", "--format", "json"]
    main([*base, "--op", "all_to_all"])
    (even,) = json.loads(capsys.readouterr().out)["results"]
    main([*base, "--op", "all_to_allv", "--skew", "3"])
    (skewed,) = json.loads(capsys.readouterr().out)["results"]
    assert even["busbw_GBps"] == pytest.approx(even["algbw_GBps"] * 15 / 16)
    assert skewed["time_us"] > even["time_us"]


def test_calibration_profile_answers_where_it_has_a_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = {
        "format": "trainsim-profile",
        "version": 1,
        "cluster": {
            "backend": "nccl",
            "device_kind": "gpu",
            "device_name": "NVIDIA A100-SXM4-80GB",
            "world_size": 8,
            "ranks_per_node": 8,
            "nodes": 1,
            "hostnames": ["node001"],
        },
        "collectives": [
            {"op": "all_reduce", "ranks": 8, "scope": "intra_node", "alpha_s": 1e-5, "busbw_Bps": 2e11}
        ],
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile), encoding="utf-8")
    main(["--topology", "dgx-a100", "-b", "1G", "-e", "1G", "--format", "json", "--calibration", str(path)])
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["algorithm"] == "calibrated"
    assert row["time_us"] == pytest.approx((1e-5 + 2 * 7 / 8 * (1 << 30) / 2e11) * 1e6)
