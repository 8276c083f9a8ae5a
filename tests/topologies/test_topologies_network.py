"""Network what-ifs on a parsed spec (topologies/network.py): NIC speed, NICs per node, oversubscription.

Expected attachments and capacities are counted by hand from the preset files (hgx-h100: NIC i on
PCIe switch i // 2; p5.48xlarge: NIC i on PCIe switch i // 4).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.collectives import collective_time
from topologies import load_cluster, network_overrides
from topologies.show import main as show_main
from topologies.summary import bisection_bandwidth
from topologies.yamlcheck import SpecError


def _nics(topo, host: int = 0) -> dict[str, float]:
    return {
        n: a["port_Bps"] for n, a in topo.graph.nodes(data=True) if a["kind"] == "nic" and a["host"] == host
    }


def _attachment(topo, nic: str) -> list[str]:
    return sorted(
        v for _, v, a in topo.graph.out_edges(nic, data=True) if not a["link_class"].startswith("fabric")
    )


def test_nic_bandwidth_sets_every_port_and_access_link():
    topo = load_cluster("hgx-h100", nodes=2, network=network_overrides(nic_bandwidth="800Gb/s"))
    assert set(_nics(topo).values()) == {100e9}
    assert topo.link("h1/nic5", "rail5").bandwidth_Bps == 100e9
    # rail5 joins two 100 GB/s NICs: its uplink carries both at 1:1
    assert topo.link("rail5", "spine0").bandwidth_Bps == 200e9


def test_fewer_nics_keep_every_other_one_spread_over_the_pcie_switches():
    topo = load_cluster("hgx-h100", nodes=2, network=network_overrides(nics_per_node=4))
    assert sorted(_nics(topo)) == ["h0/nic0", "h0/nic1", "h0/nic2", "h0/nic3"]
    # originals nic0, nic2, nic4, nic6 sat on pcie0..pcie3
    assert [_attachment(topo, f"h0/nic{j}") for j in range(4)] == [[f"h0/pcie{j}"] for j in range(4)]
    assert set(_nics(topo).values()) == {50e9}  # ports kept
    assert {n for n in topo.graph if n.startswith("rail")} == {"rail0", "rail1", "rail2", "rail3"}


def test_more_nics_repeat_each_attachment_point():
    topo = load_cluster("hgx-h100", network=network_overrides(nics_per_node=16))
    # 16 NICs from 8: nic j takes the place of nic j // 2, which sat on pcie (j // 2) // 2
    assert [_attachment(topo, f"h0/nic{j}") for j in range(16)] == [[f"h0/pcie{j // 4}"] for j in range(16)]
    p5 = load_cluster("p5.48xlarge", network=network_overrides(nics_per_node=8))
    # 8 NICs from 32: nic j takes the place of nic 4j, which sat on pcie j
    assert [_attachment(p5, f"h0/nic{j}") for j in range(8)] == [[f"h0/pcie{j}"] for j in range(8)]


def test_oversubscription_divides_the_uplinks():
    topo = load_cluster("hgx-h100", nodes=2, network=network_overrides(oversubscription="2:1"))
    assert topo.metadata["oversubscription"] == 2.0
    # each rail has two 50 GB/s NICs: 100 GB/s down, 50 GB/s up at 2:1
    assert topo.link("rail0", "spine0").bandwidth_Bps == 50e9
    # an explicit oversubscription= wins over the network record's
    wins = load_cluster(
        "hgx-h100", nodes=2, oversubscription=4, network=network_overrides(oversubscription=2)
    )
    assert wins.link("rail0", "spine0").bandwidth_Bps == 25e9


def test_no_override_builds_the_preset_unchanged():
    plain, same = (
        load_cluster("dgx-a100", nodes=2),
        load_cluster("dgx-a100", nodes=2, network=network_overrides()),
    )
    assert sorted(plain.graph.edges(data=True)) == sorted(same.graph.edges(data=True))


def test_overrides_describe_and_record_themselves():
    net = network_overrides("800Gb/s", 4, "2:1")
    assert net.describe() == "NIC 800 Gb/s, 4 NICs per node, oversubscription 2:1"
    assert net.record() == {"nic_bandwidth_Gbps": 800.0, "nics_per_node": 4, "oversubscription": 2.0}
    assert network_overrides().describe() == "as specified" and not network_overrides().given


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"nic_bandwidth": "fast"}, "--nic-bandwidth"),
        ({"nic_bandwidth": "5Tb/s"}, "--nic-bandwidth"),  # above the 1.6 Tb/s NIC port range
        ({"nics_per_node": 0}, "--nics-per-node"),
        ({"nics_per_node": 5000}, "--nics-per-node"),
        ({"oversubscription": "0.5"}, "--oversubscription"),
        ({"oversubscription": "x:1"}, "--oversubscription"),
    ],
)
def test_bad_values_name_their_flag_on_one_line(kwargs, flag):
    with pytest.raises(SpecError) as err:
        network_overrides(**kwargs)
    assert str(err.value).startswith(flag) and "\n" not in str(err.value)


def test_a_node_without_nics_cannot_be_given_some(tmp_path: Path):
    spec = tmp_path / "box.yaml"
    spec.write_text(
        "node_types:\n  box:\n    devices:\n      gpu{0..1}: {kind: gpu, spec: a10g}\n"
        "    link_classes:\n      p: {kind: pcie, bandwidth: 31.5GB/s, latency: 1us}\n"
        "    links:\n      - {between: [gpu0, gpu1], class: p}\n"
        "nodes:\n  - {type: box, count: 1}\nfabric: {type: none}\n"
    )
    with pytest.raises(SpecError, match="has no NICs"):
        load_cluster(str(spec), network=network_overrides(nics_per_node=2))
    load_cluster(str(spec), network=network_overrides(nic_bandwidth="100Gb/s"))  # nothing to change


@settings(max_examples=12, deadline=None)
@given(
    preset=st.sampled_from(["hgx-h100", "p5.48xlarge", "dgx-1v", "gb200-nvl72", "mi300x"]),
    count=st.integers(1, 40),
)
def test_any_nic_count_builds_with_that_many_nics_each_linked_like_its_source(preset: str, count: int):
    base = load_cluster(preset, nodes=2)
    topo = load_cluster(preset, nodes=2, network=network_overrides(nics_per_node=count))
    topo.validate()
    original = sorted(_nics(base), key=lambda n: int(n.rsplit("nic", 1)[1]))
    for host in (0, 1):
        assert len(_nics(topo, host)) == count
    for j in range(count):
        source = original[j * len(original) // count]
        assert _attachment(topo, f"h0/nic{j}") == _attachment(base, source)


@settings(max_examples=8, deadline=None)
@given(slow=st.sampled_from([100, 200, 400]), factor=st.sampled_from([2, 4]))
def test_faster_nics_never_slow_an_all_reduce_across_nodes(slow: int, factor: int):
    times = [
        collective_time(
            load_cluster("hgx-h100", nodes=2, network=network_overrides(nic_bandwidth=f"{rate}Gb/s")),
            "all_reduce",
            2**30,
        ).time_s
        for rate in (slow, slow * factor)
    ]
    assert times[1] <= times[0]


def test_show_takes_the_flags_and_pcie_caps_an_800g_nic(capsys):
    # two HGX B200 nodes with 4 NICs of 800 Gb/s (100 GB/s): the halves are joined by 4 NICs, each
    # behind its PCIe Gen5 x16 link of 63 GB/s, so the cut is 4 x 63 GB/s, not 4 x 100
    argv = ["hgx-b200", "--nodes", "2", "--nic-bandwidth", "800Gb/s", "--nics-per-node", "4"]
    assert show_main(argv) == 0
    out = capsys.readouterr().out
    assert "8 nic" in out and "bisection bandwidth (min cut, ranks 0..7 | 8..15, one way): 252.0 GB/s" in out
    topo = load_cluster("hgx-b200", nodes=2, network=network_overrides("800Gb/s", 4))
    assert bisection_bandwidth(topo) == pytest.approx(4 * 63e9)
