"""nvidia-smi topo -m import: realistic captures become host graphs; malformed ones name the line."""

import itertools

import networkx as nx
import pytest

from simcore.errors import TrainsimError
from tests.paths import TESTS
from topologies import load_cluster
from topologies.builders import build_cluster
from topologies.nvsmi import parse_capture, read_capture
from topologies.nvsmi_graph import capture_cluster_spec, infer_gpu, load_capture_spec

TOPO = TESTS / "data" / "topo"


def _cluster(name, gpu=None, nodes=1, nic_port=None):
    spec = load_capture_spec(TOPO / name, gpu=gpu, nic_port_Bps=nic_port)
    return build_cluster(spec, nodes=nodes)


def _kinds(topo):
    return sorted(a["kind"] for _, a in topo.graph.nodes(data=True) if a["host"] == 0)


def test_dgx_a100_capture_gives_nvswitch_and_pcie_switch_pairs():
    capture = read_capture(TOPO / "dgx-a100.txt")
    assert capture.gpu_product == "NVIDIA A100-SXM4-80GB"
    assert capture.nic_names["NIC4"] == "mlx5_6"
    topo = _cluster("dgx-a100.txt")
    assert topo.gpu_spec_name(0) == "a100-sxm-80gb"
    assert topo.link("h0/gpu3", "h0/nvswitch").bandwidth_Bps == 12 * 25e9
    # GPU0, GPU1, NIC0, NIC1 are PXB to each other: one PCIe switch
    switch = next(iter(set(topo.graph.successors("h0/nic0")) - {"leaf0"}))
    assert topo.graph.has_edge("h0/gpu0", switch) and topo.graph.has_edge("h0/gpu1", switch)
    assert not topo.graph.has_edge("h0/gpu2", switch)
    assert _kinds(topo).count("cpu") == 4  # NPS4: four NUMA nodes, SYS between them
    assert not topo.in_network_reduction("nvls")


def test_h200_capture_with_ansi_codes_has_nvls():
    topo = _cluster("hgx-h200-ansi.txt")
    assert topo.gpu_spec_name(7) == "h200-sxm"
    assert topo.in_network_reduction("nvls")
    assert topo.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 450e9
    assert topo.link("h0/gpu0", "h0/pcisw0").bandwidth_Bps == 63e9  # PCIe Gen5
    assert topo.graph.has_edge("h0/nic0", "h0/pcisw0")  # GPU0 and NIC0 are PIX


def test_dgx_h100_capture_needs_and_takes_a_gpu_model():
    with pytest.raises(TrainsimError, match="cannot tell the GPU model; pass it"):
        _cluster("dgx-h100.txt")
    topo = _cluster("dgx-h100.txt", gpu="h100-sxm", nodes=2)
    assert topo.world_size == 16 and topo.hosts == [0, 1]
    assert topo.link("h1/nic3", "leaf0").bandwidth_Bps == 50e9  # NDR default for H100


def test_old_driver_capture_with_soc_and_mlx_columns_gives_direct_nvlinks():
    capture = read_capture(TOPO / "dgx1-v100-old-driver.txt")
    assert capture.nics == ("mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3")
    assert capture.cells["GPU0", "GPU5"] == "SYS"  # SOC normalised
    topo = _cluster("dgx1-v100-old-driver.txt", gpu="v100-sxm2-32gb")
    assert "h0/nvswitch" not in topo.graph
    assert topo.link("h0/gpu0", "h0/gpu3").bandwidth_Bps == 2 * 25e9  # NV2
    assert topo.link("h0/gpu0", "h0/gpu1").bandwidth_Bps == 25e9  # NV1
    assert not topo.graph.has_edge("h0/gpu0", "h0/gpu5")
    assert _kinds(topo).count("cpu") == 2


def test_g5_capture_without_nics_gets_one_for_the_fabric():
    topo = _cluster("g5-12xlarge.txt", gpu="a10g", nodes=2, nic_port=5e9)
    assert topo.link("h0/nic0", "leaf0").bandwidth_Bps == 5e9
    assert topo.link("h0/nic0", "leaf0").kind == "ethernet"
    assert {topo.link(f"h0/gpu{i}", "h0/pcie0").kind for i in range(4)} == {"pcie"}
    assert nx.is_strongly_connected(topo.graph)


def test_nvl_pairs_capture_bridges_pairs_only():
    topo = _cluster("pcie-nvl-pairs.txt", gpu="a100-pcie-80gb")
    assert topo.link("h0/gpu0", "h0/gpu1").kind == "nvlink"
    assert topo.link("h0/gpu2", "h0/gpu3").bandwidth_Bps == 300e9
    assert not topo.graph.has_edge("h0/gpu1", "h0/gpu2")
    path = nx.shortest_path(topo.graph, "h0/gpu1", "h0/gpu2", weight="latency_s")
    assert any(topo.link(u, v).kind == "smp" for u, v in itertools.pairwise(path))


def test_capture_loads_through_load_cluster():
    topo = load_cluster(str(TOPO / "dgx-a100.txt"), nodes=2, fabric="rail-optimised")
    assert topo.world_size == 16 and topo.metadata["fabric"] == "rail-optimised"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad-fused-pxbnode.txt", r"line 4: row GPU1, column NIC1: 'PXBNODE' .*fused cells"),
        ("bad-fused-cells.txt", r"line 2: row GPU0, column GPU2: 'PHBPHB'"),
        ("bad-fused-sysnode.txt", r"line 2: .*'SYSNODE'"),
        ("bad-short-row.txt", r"line 4: row GPU2 has 2 cells, expected 4"),
        ("bad-unknown-cell.txt", r"line 5: .*'PCI' is not a connection; allowed: X, NV#, PIX"),
        ("bad-asymmetric.txt", r"GPU0 -> GPU1 is NV4 but GPU1 -> GPU0 is PHB"),
        ("bad-diagonal.txt", r"line 3: row GPU1, column GPU1 is 'PHB'; the diagonal must be X"),
        ("bad-no-matrix.txt", r"no nvidia-smi topo -m matrix found"),
    ],
)
def test_malformed_captures_name_the_line(name, message):
    with pytest.raises(TrainsimError, match=message) as info:
        read_capture(TOPO / name)
    assert name in str(info.value)


def test_space_separated_paste_is_rejected_not_guessed():
    text = "        GPU0    GPU1    CPU Affinity\nGPU0     X      NV12    0-7\nGPU1    NV12     X      0-7\n"
    with pytest.raises(TrainsimError, match="line 1: the matrix header is not tab-separated"):
        parse_capture(text, "pasted.txt")


def test_row_not_in_header_is_rejected():
    text = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU9\tPHB\t X \n"
    with pytest.raises(TrainsimError, match="line 3: row 'GPU9' is not a column"):
        parse_capture(text, "t.txt")


def test_unknown_gpu_option_lists_known_ones():
    with pytest.raises(TrainsimError, match="unknown GPU 'z100'; known:"):
        _cluster("g5-12xlarge.txt", gpu="z100")


def test_a_b200_capture_runs_nvlink_5_at_50_gb_s_a_link():
    topo = _cluster("dgx-h100.txt", gpu="b200")  # the HGX board is wired alike: NV18 to every peer
    assert topo.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 18 * 50e9
    assert topo.in_network_reduction("nvls")
    assert topo.link("h0/gpu0", "h0/pcisw0").bandwidth_Bps == 63e9  # PCIe Gen5 (GPU0 and NIC0 are PIX)
    assert {a["port_Bps"] for _, a in topo.graph.nodes(data=True) if a["kind"] == "nic"} == {50e9}


def test_an_h800_has_eight_nvlinks_so_an_nv18_capture_is_refused():
    with pytest.raises(TrainsimError, match="a h800 GPU has 8 NVLinks"):
        _cluster("dgx-h100.txt", gpu="h800")
    text = (TOPO / "dgx-h100.txt").read_text().replace("NV18", "NV8")
    topo = build_cluster(capture_cluster_spec(parse_capture(text, "h800.txt"), "h800", gpu="h800"))
    assert topo.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 8 * 25e9  # 400 GB/s bidirectional


@pytest.mark.parametrize(
    ("product", "spec"),
    [
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
    ],
)
def test_nvidia_smi_product_names_pick_the_right_part(product, spec):
    text = f"GPU 0: {product} (UUID: GPU-0)\n" + (TOPO / "dgx-h100.txt").read_text()
    capture = parse_capture(text, "capture.txt")
    assert infer_gpu(capture) == spec
