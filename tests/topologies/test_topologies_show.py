"""``python -m topologies.show``: golden summaries, computed bandwidths, one-line errors."""

from typing import Any

import pytest

from tests.goldens import assert_golden
from tests.paths import TESTS
from topologies import load_cluster
from topologies.show import main
from topologies.summary import bisection_bandwidth, injection_bandwidth

TOPO = TESTS / "data" / "topo"


@pytest.mark.parametrize(
    ("golden", "argv"),
    [
        ("topologies_show_dgx-a100.txt", ["dgx-a100", "--nodes", "2"]),
        ("topologies_show_g5.12xlarge.txt", ["g5.12xlarge", "--gpus", "8"]),
    ],
)
def test_show_matches_golden(golden, argv, capsys):
    """Regenerate with TRAINSIM_UPDATE_GOLDEN=1."""
    assert main(argv) == 0
    assert_golden(golden, capsys.readouterr().out)


def test_bisection_of_two_dgx_is_their_nics():
    assert bisection_bandwidth(load_cluster("dgx-a100", nodes=2)) == pytest.approx(8 * 25e9)


def test_oversubscription_shrinks_bisection():
    # 64 HDR NICs, 20 per leaf: traffic between the halves crosses leaf uplinks
    spec: dict[str, Any] = {"nodes": 8, "fabric": "leaf-spine"}
    full = bisection_bandwidth(load_cluster("dgx-a100", **spec))
    quarter = bisection_bandwidth(load_cluster("dgx-a100", oversubscription=4, **spec))
    assert quarter < full


def test_injection_per_gpu_shares_the_host_nic():
    one, each = injection_bandwidth(load_cluster("g5.12xlarge", nodes=2))
    assert one == pytest.approx(5e9)
    assert each == pytest.approx(5e9 / 4)
    one, each = injection_bandwidth(load_cluster("dgx-a100", nodes=2))
    assert one == pytest.approx(31.5e9)  # the GPU's own PCIe link
    assert each == pytest.approx(25e9)  # one HDR NIC per GPU


def test_show_reads_a_capture_with_gpu_option(capsys):
    assert main([str(TOPO / "g5-12xlarge.txt"), "--gpu", "a10g", "--nic-port", "40Gb/s", "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "8 x a10g" in out and "5.00 GB/s per GPU" not in out and "1.25 GB/s per GPU" in out


def test_png_is_written(tmp_path, capsys):
    path = tmp_path / "t.png"
    assert main(["pcie-nvl-pairs", "--nodes", "2", "--png", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dgx-z100"], "unknown topology 'dgx-z100'"),
        (["dgx-a100", "--gpus", "0"], "--gpus: 0 is out of range"),
        (["dgx-a100", "--gpus", "100000"], "--gpus: 100000 is out of range; allowed 1..32768"),
        (["dgx-a100", "--cluster", "hgx-h100"], "two clusters given"),
        ([], "no cluster given"),
        (["dgx-a100", "--fabric", "torus"], "--fabric: invalid choice: 'torus'"),
        (["dgx-a100", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["dgx-a100", "--oversubscription", "0.5"], "outside the physical range 1 to 50"),
        ([str(TOPO / "bad-fused-pxbnode.txt"), "--gpu", "a100-sxm-80gb"], "line 4"),
        ([str(TOPO / "dgx-h100.txt")], "cannot tell the GPU model"),
    ],
)
def test_bad_input_prints_one_error_line_and_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1


def test_a_bad_cluster_file_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main([str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not valid YAML" in err and err.count("\n") == 1


def test_cluster_flag_is_the_positional_argument(capsys):
    assert main(["dgx-a100", "--nodes", "2"]) == 0
    positional = capsys.readouterr().out
    assert main(["--cluster", "dgx-a100", "--nodes", "2"]) == 0
    assert capsys.readouterr().out == positional
