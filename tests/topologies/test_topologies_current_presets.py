"""Today's GPUs and clusters: B200, GB200 NVL72, GH200, H800, H20, MI300X, each checked against its datasheet.

Expected figures are written out from the vendors' documents (cited in the preset and device files),
not read back from the files under test.
"""

from __future__ import annotations

import math

import pytest

from simcore.hardware import device_spec
from simcore.net.routing import Router
from topologies import load_cluster
from topologies.show import main as show_main
from topologies.summary import summarise

# preset -> GPUs per node as the vendor builds it
CURRENT = {"hgx-b200": 8, "gb200-nvl72": 72, "gh200": 1, "hgx-h800": 8, "hgx-h20": 8, "mi300x": 8}

# preset -> (GPU spec, NVLink domain, per-GPU NVLink-class bandwidth each way, NICs per node, port B/s)
DATASHEET = {
    # Blackwell datasheet: NVLink 5 1.8 TB/s bidirectional per GPU; DGX B200: 8x 400 Gb/s ConnectX-7
    "hgx-b200": ("b200", 8, 1.8e12 / 2, 8, 400e9 / 8),
    # GB200 NVL72: 72 GPUs in one NVLink domain at 1.8 TB/s each; 4 ConnectX-7 per 4-GPU tray
    "gb200-nvl72": ("gb200", 72, 1.8e12 / 2, 72, 400e9 / 8),
    # one GPU per node: its NVLink-C2C goes to Grace, not to a GPU peer
    "gh200": ("gh200", 1, 0.0, 1, 400e9 / 8),
    # H800 datasheet: NVLink 400 GB/s bidirectional
    "hgx-h800": ("h800", 8, 400e9 / 2, 8, 400e9 / 8),
    # H20: full NVLink 4, 900 GB/s bidirectional
    "hgx-h20": ("h20", 8, 900e9 / 2, 8, 400e9 / 8),
    # MI300X: 7 Infinity Fabric links of 128 GB/s bidirectional (896 GB/s aggregate)
    "mi300x": ("mi300x", 8, 896e9 / 2, 8, 400e9 / 8),
}


@pytest.mark.parametrize(("name", "per_node"), CURRENT.items())
@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_each_preset_loads_at_several_gpu_counts(name: str, per_node: int, nodes: int) -> None:
    for gpus in sorted({1, max(1, per_node // 2), nodes * per_node}):
        topo = load_cluster(name, gpus=gpus)
        topo.validate()
        assert topo.world_size == gpus
        assert len(topo.hosts) == math.ceil(gpus / per_node)
        assert topo.metadata["preset"] == name


@pytest.mark.parametrize("name", CURRENT)
def test_summary_has_the_datasheet_gpus_nvlink_and_nics(name: str) -> None:
    spec, domain, nvlink_Bps, nics, port_Bps = DATASHEET[name]
    summary = summarise(load_cluster(name, nodes=2))
    assert summary.ranks == 2 * CURRENT[name]
    assert summary.rank_devices == {spec: 2 * CURRENT[name]}
    assert summary.nvlink_domain_ranks == domain
    assert summary.nvlink_per_gpu_Bps == pytest.approx(nvlink_Bps)
    assert summary.nics_per_host == nics
    topo = load_cluster(name, nodes=2)
    ports = {a["port_Bps"] for _, a in topo.graph.nodes(data=True) if a["kind"] == "nic"}
    assert ports == {port_Bps}


def test_gb200_nvl72_is_one_nvlink_domain_and_racks_join_over_nics() -> None:
    rack = load_cluster("gb200-nvl72")
    assert rack.hosts == [0] and rack.world_size == 72
    assert rack.in_network_reduction("nvls")
    # GPU 71 reaches GPU 0 over NVLink: GPU -> switch -> GPU, no NIC or CPU on the way
    route = Router.for_topology(rack).route(rack.ranks[71], rack.ranks[0])
    assert [rack.graph.edges[e]["kind"] for e in route] == ["nvswitch", "nvswitch"]
    two = load_cluster("gb200-nvl72", gpus=144)
    across = Router.for_topology(two).route(two.ranks[0], two.ranks[72])
    assert "ib" in {two.graph.edges[e]["kind"] for e in across}
    assert summarise(two).nvlink_domain_ranks == 72


def test_mi300x_is_a_full_mesh_of_seven_links_per_gpu() -> None:
    topo = load_cluster("mi300x")
    for gpu in topo.ranks:
        peers = [v for _, v, a in topo.graph.out_edges(gpu, data=True) if a["kind"] == "nvlink"]
        assert len(peers) == 7
    # ROCm blog: ~48 of an xGMI link's 64 GB/s are usable
    link = topo.graph.edges[topo.ranks[0], topo.ranks[1]]
    assert link["bandwidth_Bps"] * link["efficiency"] == pytest.approx(48e9)
    assert not topo.in_network_reduction("nvls")


def test_h800_differs_from_h100_only_in_nvlink() -> None:
    h800, h100 = load_cluster("hgx-h800"), load_cluster("hgx-h100")
    assert device_spec("h800").peak_flops == device_spec("h100-sxm").peak_flops
    assert h800.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 200e9
    assert h100.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 450e9
    assert h800.link("h0/nic0", "h0/pcie0") == h100.link("h0/nic0", "h0/pcie0")


@pytest.mark.parametrize(
    ("name", "bf16", "fp8", "memory_GiB", "memory_Bps"),
    [
        # GB200 NVL72 rack: 360 PFLOP/s FP16 and 720 PFLOP/s FP8 sparse, 13.4 TB at 576 TB/s, over 72 GPUs
        ("gb200", 360e15 / 72 / 2, 720e15 / 72 / 2, 186, 576e12 / 72),
        # H800 SXM: H100 SXM's 1979 / 3958 TFLOP/s sparse
        ("h800", 1979e12 / 2, 3958e12 / 2, 80, 3.35e12),
        # H20: 148 / 296 TFLOP/s dense, 96 GB HBM3 at 4.0 TB/s
        ("h20", 148e12, 296e12, 96, 4.0e12),
        # MI300X: dense matrix 1307.4 / 2614.9 TFLOP/s, 192 GB HBM3 at 5.3 TB/s
        ("mi300x", 1307.4e12, 2614.9e12, 192, 5.3e12),
    ],
)
def test_new_devices_have_their_datasheet_figures(
    name: str, bf16: float, fp8: float, memory_GiB: int, memory_Bps: float
) -> None:
    spec = device_spec(name)
    assert spec.flops("bf16") == pytest.approx(bf16)
    assert spec.flops("fp8") == pytest.approx(fp8)
    assert spec.memory_bytes == memory_GiB * 2**30
    assert spec.memory_bandwidth_Bps == pytest.approx(memory_Bps)


@pytest.mark.parametrize("name", CURRENT)
def test_show_summarises_and_draws_each(name: str, tmp_path, capsys) -> None:
    png = tmp_path / f"{name}.png"
    assert show_main([name, "--png", str(png)]) == 0
    out = capsys.readouterr().out
    spec, nodes = DATASHEET[name][0], 4 if name == "gh200" else 1  # gh200: a 4-node cluster
    ranks = nodes * CURRENT[name]
    assert f"ranks:    {ranks} on {nodes} host(s): {ranks} x {spec}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
