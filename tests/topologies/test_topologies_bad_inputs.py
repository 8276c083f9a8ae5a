"""Bad cluster inputs a new user hits: each is refused early with one line that says what and why.

Sizes are bounded before anything is expanded (a node count of 100 million, a device range of 100
million names, a YAML alias bomb); every specified number must lie in its physical range, and the
error shows the range and its source (an ``NV999`` capture cell); binary files and PowerShell's
UTF-16 captures get a clear line instead of a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments.what_if.cli import main as what_if_main
from simcore.errors import TrainsimError
from tests.paths import TESTS
from topologies import load_cluster
from topologies.show import main as show_main

TOPO = TESTS / "data" / "topo"
MLP = str(TESTS / "data" / "models" / "mlp.yaml")

BOX = """
node_types:
  box:
    description: {description}
    devices:
      {devices}: {{kind: gpu, spec: a10g}}
      nic0: {{kind: nic, port: {port}}}
      sw: {{kind: switch}}
    link_classes:
      pcie: {{kind: pcie, bandwidth: {bandwidth}, latency: {latency}}}
    links:
      - {{between: ["{devices}", sw], class: pcie}}
      - {{between: [nic0, sw], class: pcie}}
nodes:
  - {{type: box, count: {count}}}
fabric: {{type: leaf-spine, link_kind: ethernet, nics_per_leaf: {nics_per_leaf}}}
"""
DEFAULTS = dict(
    description="a small box",
    devices="gpu{0..3}",
    port="100Gb/s",
    bandwidth="31.5GB/s",
    latency="0.75us",
    count=2,
    nics_per_leaf=32,
)
BOMB = "\n".join(
    ["name: bomb", "description:", "  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    + ["nodes: [{type: dgx-a100, count: 1}]", "fabric: {type: none}", ""]
)


def _box(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(BOX.format(**{**DEFAULTS, **changes}), encoding="utf-8")
    return path


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], main=show_main) -> str:
    """Run a CLI that must exit 2 with exactly one line on stderr, ``error: ...``."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err


def test_the_template_is_a_valid_cluster(tmp_path):
    assert load_cluster(str(_box(tmp_path))).world_size == 8


def test_a_hundred_million_nodes_are_refused_before_building(tmp_path, capsys):
    path = _box(tmp_path, count=100_000_000)
    err = _refused([str(path)], capsys)
    assert str(path) in err and "nodes[0].count" in err
    assert "400,000,000 GPUs" in err and "at most 65,536" in err and "Llama 3" in err


def test_the_node_count_bound_also_holds_for_what_if(tmp_path, capsys):
    path = _box(tmp_path, count=100_000_000)
    err = _refused(["--cluster", str(path), "--model", MLP, "--gpus", "2"], capsys, what_if_main)
    assert "nodes[0].count" in err


def test_a_device_range_of_a_hundred_million_is_refused_unexpanded(tmp_path, capsys):
    err = _refused([str(_box(tmp_path, devices="gpu{0..99999999}"))], capsys)
    assert "node_types.box.devices" in err and "'gpu{0..99999999}'" in err
    assert "100,000,000 devices in one node; at most 1,024" in err and "NVL72" in err


def test_a_device_range_in_an_explicit_graph_is_bounded_by_the_cluster(tmp_path, capsys):
    path = tmp_path / "graph.yaml"
    path.write_text(
        "graph:\n  devices:\n    'h{0..99999999}/gpu0': {kind: gpu, spec: a10g}\n  links: []\n",
        encoding="utf-8",
    )
    err = _refused([str(path)], capsys)
    assert "graph.devices" in err and "at most 262,144" in err


def test_an_alias_bomb_in_the_description_is_not_expanded(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB, encoding="utf-8")
    err = _refused([str(path)], capsys)
    assert str(path) in err and "aliases are expanded" in err and "billion laughs" in err


def test_a_few_aliases_are_fine_but_a_description_must_be_text(tmp_path):
    path = _box(tmp_path, description="&d [a, b]")
    with pytest.raises(TrainsimError, match=r"node_types\.box\.description: expected text, got a list"):
        load_cluster(str(path))


def test_a_description_longer_than_a_page_is_refused(tmp_path):
    with pytest.raises(
        TrainsimError, match=r"box\.description: 5,000 characters in one text field; at most 4,096"
    ):
        load_cluster(str(_box(tmp_path, description="x" * 5000)))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"bandwidth": "1e-300GB/s"},
            r"link_classes\.pcie\.bandwidth: 1e-300GB/s is outside .* 1Mb/s to 10TB/s",
        ),
        ({"bandwidth": "50TB/s"}, r"bandwidth: 50TB/s is outside the physical range .*NVLink 5"),
        ({"latency": "10s"}, r"latency: 10s is outside the physical range 0s to 1s"),
        ({"port": "5000Tb/s"}, r"nic0\.port: 5000Tb/s is outside the physical range 1Mb/s to 1\.6Tb/s"),
        ({"nics_per_leaf": 100000}, r"nics_per_leaf: 100000 is outside the physical range 1 to 1024"),
    ],
)
def test_numbers_outside_their_physical_range_name_range_and_source(tmp_path, capsys, changes, expected):
    err = _refused([str(_box(tmp_path, **changes))], capsys)
    assert re.search(expected, err), err
    assert "(source: " in err


def _capture(tmp_path: Path, text: str, name: str = "topo.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_nv999_is_refused_with_the_nvlink_range_and_its_source(tmp_path, capsys):
    text = (TOPO / "dgx-a100.txt").read_text(encoding="utf-8").replace("NV12", "NV999")
    err = _refused([str(_capture(tmp_path, text))], capsys)
    assert "row GPU0, column GPU1: NV999 is outside the physical range 1 to 18" in err
    assert "H100 SXM has 18 NVLink 4 links" in err and "datasheet" in err


def test_more_nvlinks_than_the_gpu_model_has_is_refused(tmp_path, capsys):
    text = (TOPO / "dgx-a100.txt").read_text(encoding="utf-8").replace("NV12", "NV13")
    err = _refused([str(_capture(tmp_path, text))], capsys)
    assert "is NV13, but a a100-sxm-80gb GPU has 12 NVLinks" in err


@pytest.mark.parametrize("name", ["cluster.yaml", "topo.txt"])
def test_binary_files_get_one_line(tmp_path, capsys, name):
    path = tmp_path / name
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    err = _refused([str(path)], capsys)
    assert f"{path}: a binary file" in err


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_bytes("description: caf\u00e9\n".encode("latin-1"))
    err = _refused([str(path)], capsys)
    assert "not a UTF-8 text file (byte 0xe9 at offset 16)" in err


@pytest.mark.parametrize("codec", ["utf-16", "utf-8-sig", "utf-32"])
def test_captures_with_a_byte_order_mark_are_decoded(tmp_path, codec):
    """Windows PowerShell 5's `nvidia-smi topo -m > topo.txt` writes UTF-16 with a BOM."""
    text = (TOPO / "dgx-a100.txt").read_text(encoding="utf-8").replace("\n", "\r\n")
    path = tmp_path / "topo.txt"
    path.write_bytes(text.encode(codec))
    expected = load_cluster(str(TOPO / "dgx-a100.txt"))
    got = load_cluster(str(path))
    assert sorted(got.graph.edges) == sorted(expected.graph.edges)


def test_utf16_without_a_byte_order_mark_is_refused_with_a_hint(tmp_path, capsys):
    path = tmp_path / "topo.txt"
    path.write_bytes((TOPO / "dgx-a100.txt").read_text(encoding="utf-8").encode("utf-16-le"))
    err = _refused([str(path)], capsys)
    assert "looks like UTF-16" in err and "Out-File -Encoding utf8" in err


def test_a_huge_input_file_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"# padding\n" * 200_000)
    err = _refused([str(path)], capsys)
    assert "the file gives 2,000,000 bytes in one input file; at most 1,048,576" in err


def test_a_directory_is_not_a_cluster_file(tmp_path, capsys):
    folder = tmp_path / "spec.yaml"
    folder.mkdir()
    err = _refused([str(folder)], capsys)
    assert "a folder, not a file" in err


def test_deep_nesting_is_refused(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text("description: " + "[" * 200 + "]" * 200 + "\n", encoding="utf-8")
    err = _refused([str(path)], capsys)
    assert "levels of nesting; at most 64" in err


def test_a_number_with_thousands_of_digits_is_one_line(tmp_path, capsys):
    err = _refused([str(_box(tmp_path, count="9" * 5000))], capsys)
    assert "a number has too many digits" in err


def test_gpus_beyond_the_cluster_bound_are_refused_before_laying_out_servers():
    with pytest.raises(TrainsimError, match=r"gpus=1000000000 gives 1,000,000,000 GPUs"):
        load_cluster("dgx-a100", gpus=1_000_000_000)
    with pytest.raises(TrainsimError, match=r"100,000,000 x dgx-a100 gives 800,000,000 GPUs"):
        load_cluster("dgx-a100", nodes=100_000_000)
