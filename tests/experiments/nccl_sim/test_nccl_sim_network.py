"""``python -m experiments.nccl_sim``: the network what-if flags, and today's presets against published
nccl-tests figures.

Expected bus bandwidths of the flag tests are hand-counted: a ring all-reduce's bus bandwidth is the
achievable rate of its slowest hop, and a NIC reaches 0.96 of its port (simcore/data/links.yaml).
"""

from __future__ import annotations

import json

import pytest

from experiments.nccl_sim.cli import main

_RING_8G = ["--algo", "ring", "-b", "8G", "-e", "8G", "--format", "json", "--quiet"]


def _busbw(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, dict]:
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    return doc["results"][-1]["busbw_GBps"], doc


def test_nics_per_node_and_nic_bandwidth_bound_a_two_node_ring(capsys: pytest.CaptureFixture[str]) -> None:
    one_nic = ["--cluster", "hgx-h100", "--gpus", "16", "--nics-per-node", "1", *_RING_8G]
    busbw, doc = _busbw(one_nic, capsys)
    assert busbw == pytest.approx(50 * 0.96, rel=0.01)  # one 400 Gb/s NIC per node
    assert doc["network"] == {"nic_bandwidth_Gbps": None, "nics_per_node": 1, "oversubscription": None}
    busbw, doc = _busbw([*one_nic, "--nic-bandwidth", "200Gb/s"], capsys)
    assert busbw == pytest.approx(25 * 0.96, rel=0.01)
    assert doc["network"]["nic_bandwidth_Gbps"] == 200.0


def test_oversubscription_bounds_a_ring_that_crosses_leaves(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 HGX H100 nodes, 64 NICs on two leaves of 32: the ring crosses between the leaves once each
    # way, striped over 8 NICs. At 8:1 a leaf's uplink is 32 x 50 / 8 = 200 GB/s, 192 achievable.
    argv = ["--cluster", "hgx-h100", "--gpus", "64", "--fabric", "leaf-spine", *_RING_8G]
    full, doc = _busbw(argv, capsys)
    assert "network" not in doc  # nothing overridden: the document is as before
    over, doc = _busbw([*argv, "--oversubscription", "8:1"], capsys)
    assert over == pytest.approx(200 * 0.96, rel=0.02)
    assert over < full
    assert doc["network"]["oversubscription"] == 8.0


def test_the_header_names_the_network_what_if(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--cluster", "hgx-b200", "--gpus", "16", "-b", "1M", "-e", "1M", "--quiet"]
    assert main([*argv, "--nic-bandwidth", "800Gb/s", "--nics-per-node", "4", "--oversubscription", "2"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "trainsim simulation" in line)
    assert "network NIC 800 Gb/s, 4 NICs per node, oversubscription 2:1;" in header
    assert main(argv) == 0
    assert "network" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nic-bandwidth", "fast"], "--nic-bandwidth: bandwidth: cannot parse 'fast'"),
        (["--nic-bandwidth", "2Tb/s"], "--nic-bandwidth: 2Tb/s is outside the physical range"),
        (["--nics-per-node", "0"], "--nics-per-node: 0 is out of range"),
        (["--nics-per-node", "two"], "--nics-per-node"),
        (["--oversubscription", "0.5"], "--oversubscription: 0.5 is outside the physical range"),
        (["--oversubscription", "2:0"], "--oversubscription: '2:0' is not a ratio"),
    ],
)
def test_bad_network_values_get_one_error_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--cluster", "hgx-h100", "-b", "1M", "-e", "1M", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("cluster", "gpus", "published", "low", "high"),
    [
        # 8x B200, all_reduce_perf: "Ours is 830+" GB/s busbw (NVIDIA/nccl#1807, 2025-08).
        ("hgx-b200", 8, 830.0, 0.9, 1.1),
        # 72x GB200 NVL72, all_reduce_perf 4 GiB: 839.16 GB/s busbw out of place (coreweave/nccl-tests
        # PR #43, full-rack example output). The model runs NVLS on every GPU link at NCCL's Blackwell
        # NVLS efficiency and gives ~1000 GB/s (+20%): the measured NVLS rate on the rack (algbw 425
        # GB/s) is below an 8-GPU board's (~474), a loss across the rack's 18 switch chips the model
        # does not have. The band is wide accordingly.
        ("gb200-nvl72", 72, 839.16, 0.8, 1.25),
        # 8x H800, all_reduce NVLS: 215 GB/s busbw (NVIDIA/nccl#1374, 2024-07).
        ("hgx-h800", 8, 215.0, 0.9, 1.1),
    ],
)
def test_all_reduce_busbw_is_near_published_nccl_tests(
    cluster: str, gpus: int, published: float, low: float, high: float, capsys: pytest.CaptureFixture[str]
) -> None:
    busbw, doc = _busbw(
        ["--cluster", cluster, "--gpus", str(gpus), "-b", "4G", "-e", "4G", "--format", "json", "--quiet"],
        capsys,
    )
    assert doc["ranks"] == gpus
    assert low * published <= busbw <= high * published, (
        f"{cluster}: {busbw:.1f} GB/s vs published {published}"
    )
