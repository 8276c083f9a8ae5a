"""experiments.what_if: the network what-if flags, and a run on each of today's presets."""

from __future__ import annotations

import json

import pytest

from experiments.what_if.cli import main
from simcore.hardware import device_spec

_SMALL = [
    "--model",
    "gpt2-small",
    "--strategies",
    "ddp",
    "--batch-per-gpu",
    "2",
    "--micro-batch",
    "1",
    "--quiet",
]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("cluster", "gpus"),
    [("hgx-b200", 16), ("gb200-nvl72", 72), ("gh200", 4), ("hgx-h800", 8), ("hgx-h20", 16), ("mi300x", 8)],
)
def test_a_what_if_runs_on_each_current_preset(
    cluster: str, gpus: int, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _json(["--cluster", cluster, "--gpus", str(gpus), *_SMALL], capsys)
    (record,) = [r for r in doc["records"] if r["gpus"] == gpus]
    assert record["cluster"] == cluster and record["fits"]
    assert record["memory_capacity_bytes"] == device_spec(record["device"]).memory_bytes
    assert record["step_time_s"] > 0 and "network" not in doc


def test_fewer_and_slower_nics_never_speed_up_a_two_node_step(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--cluster", "hgx-h100", "--gpus", "16", *_SMALL]
    steps = {}
    for label, flags in {
        "as built": [],
        "1 NIC": ["--nics-per-node", "1"],
        "1 slow NIC": ["--nics-per-node", "1", "--nic-bandwidth", "25Gb/s"],
    }.items():
        doc = _json([*base, *flags], capsys)
        steps[label] = next(r["step_time_s"] for r in doc["records"] if r["gpus"] == 16)
    assert steps["as built"] <= steps["1 NIC"] < steps["1 slow NIC"]
    assert doc["network"] == {"nic_bandwidth_Gbps": 25.0, "nics_per_node": 1, "oversubscription": None}


def test_the_header_names_the_network_what_if(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--cluster",
        "hgx-b200",
        "--gpus",
        "16",
        *_SMALL,
        "--oversubscription",
        "4:1",
        "--nic-bandwidth",
        "800Gb/s",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "network what-if: NIC 800 Gb/s, oversubscription 4:1" in lines[:3]


def test_layouts_take_the_network_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--cluster", "hgx-h100", "--gpus", "16", "--model", "gpt2-small", "--strategies", "ddp"]
    argv += ["--global-batch", "32", "--micro-batch", "1", "--pp", "2", "--quiet"]
    plain = _json(argv, capsys)
    slow = _json([*argv, "--nics-per-node", "1", "--nic-bandwidth", "10Gb/s"], capsys)
    step = [next(r["step_time_s"] for r in d["records"] if r["gpus"] == 16) for d in (plain, slow)]
    assert step[0] < step[1]
    assert slow["network"]["nics_per_node"] == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nic-bandwidth", "0Gb/s"], "--nic-bandwidth"),
        (["--nics-per-node", "-1"], "--nics-per-node"),
        (["--oversubscription", "51"], "--oversubscription: 51 is outside the physical range"),
    ],
)
def test_bad_network_values_get_one_error_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", *_SMALL, *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_h800_computes_as_h100_and_is_never_faster(capsys: pytest.CaptureFixture[str]) -> None:
    # Same silicon (devices.yaml, efficiency.yaml); only NVLink is cut from 450 to 200 GB/s each way.
    argv = ["--cluster", "hgx-h100,hgx-h800", "--gpus", "8", "--model", "llama2-7b", "--strategies", "fsdp"]
    doc = _json([*argv, "--quiet"], capsys)
    h100, h800 = (
        next(r for r in doc["records"] if r["cluster"] == c and r["gpus"] == 8)
        for c in ("hgx-h100", "hgx-h800")
    )
    assert h800["step_time_s"] > h100["step_time_s"]
    assert h800["exposed_comm_s"] > h100["exposed_comm_s"]
    compute = [r["step_time_s"] - r["exposed_comm_s"] for r in (h100, h800)]
    assert compute[1] == pytest.approx(compute[0], rel=1e-3)
