"""Presets: every one loads, validates, and has the structure its datasheet describes."""

import itertools

import pytest

from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.limits import check_physical
from topologies import load_cluster, preset_names

PRESETS = [
    "dgx-1v",
    "dgx-a100",
    "hgx-h100",
    "hgx-h100-96gb",
    "hgx-h200",
    "g5.12xlarge",
    "g5.48xlarge",
    "pcie-nvl-pairs",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "a100-roce-400g",
    "h100-roce-800g",
    "h100-pcie-nvlink-pair",
    "h100-pcie-nvlink-pair-1bridge",
    "h100-pcie-nvlink-pair-2bridge",
    "rtx5090-pcie",
    "rtx4090-pcie",
    "a100-40gb-hdr4",
    "a100-hdr2",
    "gtx980-1gbe",
]


# Today's parts (tests/topologies/test_topologies_current_presets.py): not all are one PCIe server each
CURRENT_PRESETS = ["hgx-b200", "gb200-nvl72", "gh200", "hgx-h800", "hgx-h20", "mi300x"]


def test_preset_names_are_the_documented_ones():
    assert preset_names() == sorted(PRESETS + CURRENT_PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_with_metadata_and_gpu_specs(name):
    topo = load_cluster(name)
    topo.validate()
    assert topo.metadata["preset"] == name
    assert topo.metadata["host_types"] == [name]
    assert topo.metadata["gpus_per_host"] == topo.world_size
    for rank in range(topo.world_size):
        assert device_spec(topo.gpu_spec_name(rank)).kind == "gpu"
    kinds = {attrs["kind"] for _, attrs in topo.graph.nodes(data=True)}
    assert {"gpu", "cpu", "nic", "pcie"} <= kinds


def test_dgx_a100_16_gpus_is_two_hosts():
    topo = load_cluster("dgx-a100", gpus=16)
    assert topo.world_size == 16
    assert topo.hosts == [0, 1]
    assert topo.ranks[8] == "h1/gpu0"
    assert topo.metadata["gpus_per_host"] == 8
    assert topo.metadata["fabric"] == "rail-optimised"


def test_gpus_fewer_than_a_host_places_only_those():
    topo = load_cluster("hgx-h100", gpus=4)
    assert topo.ranks == [f"h0/gpu{i}" for i in range(4)]
    assert topo.metadata["gpus_per_host"] == 4


def test_nvswitch_and_rail_links_carry_datasheet_bandwidth():
    topo = load_cluster("dgx-a100", nodes=2)
    assert topo.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 300e9
    assert topo.link("h0/nic3", "rail3").bandwidth_Bps == 25e9
    assert topo.link("h1/nic3", "rail3").kind == "ib"
    h100 = load_cluster("hgx-h100", nodes=2)
    assert h100.link("h0/gpu0", "h0/nvswitch").bandwidth_Bps == 450e9
    assert h100.link("h0/nic0", "rail0").bandwidth_Bps == 50e9


def test_a_single_server_has_no_fabric_switches():
    topo = load_cluster("dgx-a100")
    assert all(attrs["host"] == 0 for _, attrs in topo.graph.nodes(data=True))
    assert not topo.in_network_reduction("sharp")


def test_in_network_reduction_where_the_hardware_has_it():
    assert load_cluster("hgx-h100").in_network_reduction("nvls")
    assert load_cluster("hgx-h200").in_network_reduction("nvls")
    assert not load_cluster("dgx-a100").in_network_reduction("nvls")
    assert load_cluster("dgx-a100", nodes=2).in_network_reduction("sharp")
    assert not load_cluster("g5.12xlarge", nodes=2).in_network_reduction("sharp")


def test_g5_has_no_nvlink_and_one_shared_nic():
    topo = load_cluster("g5.12xlarge", nodes=2)
    kinds = {attrs["kind"] for _, _, attrs in topo.graph.edges(data=True)}
    assert not kinds & {"nvlink", "nvswitch"}
    nics = [n for n, a in topo.graph.nodes(data=True) if a["kind"] == "nic"]
    assert nics == ["h0/nic0", "h1/nic0"]
    assert topo.link("h0/nic0", "leaf0").bandwidth_Bps == 5e9


def test_nvl_pairs_are_bridged_only_in_pairs():
    topo = load_cluster("pcie-nvl-pairs")
    assert topo.graph.has_edge("h0/gpu0", "h0/gpu1")
    assert topo.graph.has_edge("h0/gpu2", "h0/gpu3")
    assert not topo.graph.has_edge("h0/gpu1", "h0/gpu2")
    assert topo.link("h0/gpu0", "h0/gpu1").kind == "nvlink"


def test_preferred_intra_node_route_is_nvlink():
    """Latencies are set so the lowest-latency path between GPUs uses NVLink, not PCIe."""
    import networkx as nx

    for name, a, b in [("dgx-a100", "h0/gpu0", "h0/gpu1"), ("pcie-nvl-pairs", "h0/gpu0", "h0/gpu1")]:
        topo = load_cluster(name)
        path = nx.shortest_path(topo.graph, a, b, weight="latency_s")
        kinds = {topo.link(u, v).kind for u, v in itertools.pairwise(path)}
        assert kinds <= {"nvlink", "nvswitch"}, (name, path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 0}, "gpus=0 is not allowed"),
        ({"gpus": 20, "nodes": 2}, "hold 1..16"),
        ({"nodes": 0}, "nodes=0"),
        ({"fabric": "torus"}, "allowed: leaf-spine, rail-optimised, none"),
        ({"oversubscription": 0.5}, "outside the physical range 1 to 50"),
        ({"nodes": 2, "fabric": "none"}, "joins nothing"),
    ],
)
def test_bad_overrides_are_user_errors(kwargs, message):
    with pytest.raises(TrainsimError, match=message):
        load_cluster("dgx-a100", **kwargs)


def test_unknown_preset_lists_presets():
    with pytest.raises(TrainsimError, match=r"presets: (\S+, )*dgx-a100"):
        load_cluster("dgx-z100")


@pytest.mark.parametrize("preset", preset_names())
def test_shipped_presets_lie_inside_their_physical_ranges(preset):
    topo = load_cluster(preset, nodes=2)
    for _, _, attrs in topo.graph.edges(data=True):
        if attrs["link_class"] != "fabric-uplink":  # derived: the sum of a leaf's NIC ports
            check_physical("link_bandwidth", attrs["bandwidth_Bps"], preset)
        check_physical("link_latency", attrs["latency_s"], preset)


@pytest.mark.parametrize(
    ("name", "per_node_Bps"), [("a100-roce-400g", 400e9 / 8), ("h100-roce-800g", 800e9 / 8)]
)
def test_roce_presets_carry_the_published_per_node_network_total(name, per_node_Bps):
    # fms-fsdp README: 400 Gbps/node (A100) and 800 Gbps/node (H100); the NIC split is assumed.
    topo = load_cluster(name, nodes=2)
    out = [topo.link(src, dst) for src, dst in topo.graph.edges if src.startswith("h0/nic")]
    total = sum(link.bandwidth_Bps for link in out if link.kind == "roce")
    assert total == pytest.approx(per_node_Bps)


@pytest.mark.parametrize(
    ("name", "bridges"),
    [
        ("h100-pcie-nvlink-pair-1bridge", 1),
        ("h100-pcie-nvlink-pair-2bridge", 2),
        ("h100-pcie-nvlink-pair", 3),
    ],
)
def test_h100_pcie_pair_bridges_are_four_nvlink4_links_each(name, bridges):
    """Each bridge is 4 NVLink4 links; NCCL counts a link at SM90_NVLINK_BW = 20.6 GB/s (topo.h)."""
    topo = load_cluster(name)
    attrs = topo.graph.edges["h0/gpu0", "h0/gpu1"]
    assert attrs["kind"] == "nvlink"
    assert attrs["bandwidth_Bps"] == pytest.approx(bridges * 4 * 25e9)
    assert attrs["bandwidth_Bps"] * attrs["efficiency"] == pytest.approx(bridges * 4 * 20.6e9)
