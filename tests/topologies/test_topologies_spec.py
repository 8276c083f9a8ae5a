"""User cluster specs: the documented format loads; mistakes name the file, the key and what is allowed."""

import pytest
import yaml

from simcore.errors import TrainsimError
from tests.paths import REPO
from topologies import load_cluster

EXAMPLES = REPO / "topologies" / "examples"

BASE = {
    "name": "t",
    "node_types": {
        "box": {
            "devices": {
                "gpu{0..1}": {"kind": "gpu", "spec": "a10g"},
                "cpu0": {"kind": "cpu"},
                "nic0": {"kind": "nic", "port": "40Gb/s"},
            },
            "link_classes": {"pcie": {"kind": "pcie", "bandwidth": "31.5GB/s", "latency": "0.75us"}},
            "links": [
                {"between": ["gpu{0..1}", "cpu0"], "class": "pcie"},
                {"between": ["nic0", "cpu0"], "class": "pcie"},
            ],
        }
    },
    "nodes": [{"type": "box", "count": 2}],
    "fabric": {"type": "leaf-spine", "link_kind": "ethernet"},
}


def _write(tmp_path, doc, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def _mutated(change):
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    change(doc)
    return doc


def test_base_spec_loads(tmp_path):
    topo = load_cluster(_write(tmp_path, BASE))
    assert topo.world_size == 4
    assert topo.ranks == ["h0/gpu0", "h0/gpu1", "h1/gpu0", "h1/gpu1"]
    assert topo.link("h0/nic0", "leaf0").bandwidth_Bps == 5e9


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_shipped_examples_load(example):
    topo = load_cluster(str(EXAMPLES / example))
    topo.validate()
    assert topo.world_size >= 2


def test_cpu_loopback_cluster_has_cpu_ranks():
    topo = load_cluster(str(EXAMPLES / "cpu-loopback.yaml"))
    assert [topo.node(r)["kind"] for r in topo.ranks] == ["cpu", "cpu"]
    assert topo.gpu_spec_name(0) == "cpu"
    assert {link.kind for link in topo.links()} == {"loopback"}


def _set(path, value):
    def change(doc):
        *keys, last = path
        target = doc
        for key in keys:
            target = target[key]
        target[last] = value

    return change


BAD = [
    (_set(["colour"], "red"), "unknown key 'colour'; allowed: nodes, fabric"),
    (_set(["fabric", "type"], "torus"), "fabric.type: 'torus' is not allowed; allowed: leaf-spine"),
    (_set(["fabric", "speed"], 1), "fabric: unknown key 'speed'"),
    (_set(["node_types", "box", "link_classes", "pcie", "bandwidth"], 0), "bandwidth: 0 is not allowed"),
    (_set(["node_types", "box", "link_classes", "pcie", "bandwidth"], "0GB/s"), "greater than zero"),
    (
        _set(["node_types", "box", "links"], [{"between": ["gpu{0..1}", "cpu0"], "class": "pcie"}]),
        "disconnected",
    ),
    (_set(["node_types", "box", "devices", "gpu{0..1}", "spec"], "a10x"), "unknown device 'a10x'; known:"),
    (_set(["node_types", "box", "devices", "cpu0", "kind"], "fpga"), "allowed: gpu, cpu, nic, switch, pcie"),
    (
        _set(["node_types", "box", "links", 0, "class"], "nvlink9"),
        "unknown link class 'nvlink9'; defined: pcie",
    ),
    (_set(["node_types", "box", "links", 0, "between"], ["gpu{0..1}", "cpu{0..2}"]), "cannot pair up"),
    (_set(["node_types", "box", "links", 0, "between"], ["gpu7", "cpu0"]), "unknown device 'gpu7'"),
    (_set(["nodes", 0, "type"], "dgx-z100"), "neither declared in node_types"),
    (_set(["nodes", 0, "count"], 0), "count: 0 is not allowed"),
    (_set(["fabric", "oversubscription"], 121), "outside the physical range 1 to 50"),
    (_set(["node_types", "box", "devices", "nic0"], {"kind": "nic"}), "a nic needs 'port'"),
    (
        _set(["node_types", "box", "link_classes", "pcie", "efficiency"], 1.5),
        "efficiency must be a number in",
    ),
    (_set(["fabric", "efficiency"], 0), "efficiency must be a number in"),
    (_set(["fabric", "collnet"], "yes"), "collnet: 'yes' is not allowed; use true or false"),
    (_set(["fabric", "link_kind"], "myrinet"), "allowed: ib, roce, efa, ethernet, loopback"),
    (_set(["node_types", "box", "p2p"], "no"), "p2p: 'no' is not allowed"),
    (_set(["node_types", "box", "devices", "cpu0", "vendor"], "via"), "vendor: 'via' is not allowed"),
    (
        _set(["fabric", "nccl_env"], {"NCCL_SOCKET_IFNAME": "eth0"}),
        "nccl_env: 'NCCL_SOCKET_IFNAME' is not allowed",
    ),
    (
        _set(["fabric", "nccl_env"], {"NCCL_BUFFSIZE": "lots"}),
        "NCCL_BUFFSIZE: 'lots' is not allowed; give a byte",
    ),
    (_set(["fabric", "nccl_env"], ["NCCL_PROTO=simple"]), "nccl_env: .* give a mapping"),
]


def test_links_run_at_the_achievable_rate_unless_the_spec_measured_one(tmp_path):
    """A GPU cluster's links get NCCL's achievable fraction of their rate; a spec's own figure wins."""
    topo = load_cluster(_write(tmp_path, BASE))
    assert topo.graph.edges["h0/gpu0", "h0/cpu0"]["efficiency"] == pytest.approx(0.762)
    assert topo.graph.edges["h0/nic0", "leaf0"]["efficiency"] == pytest.approx(0.90)  # TCP
    measured = _mutated(_set(["node_types", "box", "link_classes", "pcie", "efficiency"], 0.5))
    measured["fabric"]["efficiency"] = 0.8
    measured["node_types"]["box"]["p2p"] = False
    topo = load_cluster(_write(tmp_path, measured))
    assert topo.graph.edges["h0/gpu0", "h0/cpu0"]["efficiency"] == 0.5
    assert topo.graph.edges["h0/nic0", "leaf0"]["efficiency"] == 0.8
    assert topo.node("h0/gpu0")["p2p"] is False
    cpu = load_cluster(str(EXAMPLES / "cpu-loopback.yaml"))  # gloo clusters are calibrated, not derated
    assert all("efficiency" not in a for _, _, a in cpu.graph.edges(data=True))


def test_fabric_nccl_env_reaches_the_topology(tmp_path):
    """What a network plugin sets travels with the cluster (the collectives read it)."""
    spec = _mutated(_set(["fabric", "nccl_env"], {"NCCL_PROTO": "simple", "NCCL_BUFFSIZE": 8388608}))
    topo = load_cluster(_write(tmp_path, spec))
    assert topo.metadata["nccl_env"] == {"NCCL_BUFFSIZE": "8388608", "NCCL_PROTO": "simple"}


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_specs_name_file_key_and_allowed_values(tmp_path, change, message):
    path = _write(tmp_path, _mutated(change))
    with pytest.raises(TrainsimError, match=message) as info:
        load_cluster(path)
    assert path in str(info.value)


def test_zero_bandwidth_in_an_explicit_graph_is_rejected(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "explicit-two-hosts.yaml").read_text())
    doc["graph"]["link_classes"]["eth-100g"]["bandwidth"] = "0Gb/s"
    with pytest.raises(TrainsimError, match=r"eth-100g\.bandwidth"):
        load_cluster(_write(tmp_path, doc))


def test_disconnected_explicit_graph_is_rejected(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "explicit-two-hosts.yaml").read_text())
    doc["graph"]["links"] = doc["graph"]["links"][:3]  # no switch links
    with pytest.raises(TrainsimError, match="disconnected"):
        load_cluster(_write(tmp_path, doc))


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = _write(tmp_path, "name: x\nnodes: [1, 2\nfabric: {}\n")
    with pytest.raises(TrainsimError, match=r"spec.yaml: not valid YAML \(line \d+\)"):
        load_cluster(path)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(TrainsimError, match="no such file"):
        load_cluster(str(tmp_path / "nope.yaml"))


def test_unknown_name_lists_presets():
    with pytest.raises(TrainsimError, match=r"presets: (\S+, )*dgx-a100, (\S+, )*g5\.12xlarge"):
        load_cluster("dgx")


def test_cpu_cluster_builder_makes_cpu_ranks_on_loopback():
    from topologies import cpu_cluster

    one = cpu_cluster(4)
    assert one.world_size == 4 and one.metadata["gpus_per_host"] == 4
    assert {one.node(r)["kind"] for r in one.ranks} == {"cpu"}
    assert {link.kind for link in one.links()} == {"loopback"}
    two = cpu_cluster(2, hosts=2, nic_Bps=1.25e8, nic_latency_s=100e-6)
    assert two.hosts == [0, 1]
    assert two.link("h0/nic0", "leaf0").bandwidth_Bps == 1.25e8
    with pytest.raises(TrainsimError, match="must both be >= 1"):
        cpu_cluster(0)
