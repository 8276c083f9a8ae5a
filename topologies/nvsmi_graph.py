"""Turn a parsed ``nvidia-smi topo -m`` capture into a node type (devices + internal links).

Structure inferred from the matrix (union-find over the connection classes):

- GPUs and NICs related by ``PIX``/``PXB`` share a PCIe switch ``pcisw{k}``;
- those related by ``PHB`` (or closer) share a host bridge ``pcie{k}``;
- those related by ``NODE`` (or closer), or GPUs with the same NUMA Affinity, share a NUMA node,
  modelled as a CPU ``cpu{k}``; CPUs are joined pairwise by SMP links (``SYS``).
- ``NV#``: if a GPU's NVLink count summed over its peers exceeds what one GPU of its model has
  (NV12 to all seven peers on a DGX A100), the GPUs hang off an NVSwitch ``nvswitch`` at
  ``max(#) x`` the per-link rate each way; otherwise each pair gets a direct NVLink of ``#`` links.

Per-class figures (each way): NVLink 25 GB/s per link for NVLink 2, 3 and 4 (V100 6 links =
300 GB/s bidirectional, A100 12 = 600, H100 18 = 900, H800 8 = 400) and 50 GB/s for NVLink 5
(B200 and GB200: 18 links = 1.8 TB/s; NVIDIA datasheets); PCIe x16 by the GPU's
generation (Gen3 15.75, Gen4 31.5, Gen5 63 GB/s; PCI-SIG); host bridge into the socket four x16
ports' worth and SMP 100 GB/s (engineering estimates). Latencies as in the presets (NVSwitch hop
0.5 us, direct NVLink 1 us, PCIe hop 0.75 us; estimates). A capture shows no Ethernet NIC (AWS
ENA, for one, is not a PCIe peer of the GPUs): then one NIC is attached to the first host bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from types import MappingProxyType

from simcore.errors import TrainsimError
from simcore.hardware import device_names, device_spec
from simcore.limits import physical_range
from topologies.nvsmi import Capture, read_capture
from topologies.sizes import check_node_counts
from topologies.spec_types import ClusterSpec, DeviceDecl, FabricSpec, LinkDecl, NodeType
from topologies.yamlcheck import SpecError, shown

__all__ = ["capture_cluster_spec", "capture_node_type", "infer_gpu", "load_capture_spec"]

NVLINK_PER_LINK_BPS = 25e9
# NVLink 5 (Blackwell) doubles the per-link rate: 18 links = 1.8 TB/s bidirectional per GPU.
_NVLINK_PER_LINK_BPS = {"b200": 50e9, "gb200": 50e9}
# NVLinks per GPU (datasheets: V100 SXM2 6, A100 SXM4 12, H100/H200/H20 SXM 18, H800 8 (400 GB/s),
# B200/GB200 18); no pair shares more.
_NVLINKS_PER_GPU = {
    "v100": 6,
    "a100": 12,
    "h100": 18,
    "h200": 18,
    "h800": 8,
    "h20": 18,
    "b200": 18,
    "gb200": 18,
}
_PCIE_X16_BPS = {
    "v100": 15.75e9,
    "a100": 31.5e9,
    "a10g": 31.5e9,
    **{family: 63e9 for family in ("h100", "h200", "h800", "h20", "gh200", "b200", "gb200")},
}
# Hopper and Blackwell NVSwitches reduce in the switch (NVLink SHARP)
_NVLS_FAMILIES = ("h100", "h200", "h800", "h20", "b200", "gb200")
# NDR 400 Gb/s per GPU on Hopper and Blackwell servers, HDR 200 Gb/s on A100, else 100 Gb/s
_NIC_PORT_BPS = {**{family: 50e9 for family in (*_NVLS_FAMILIES, "gh200")}, "a100": 25e9}
_SMP_BPS = 100e9
_PRODUCTS = (  # substrings of nvidia-smi product names -> device spec; longer names first
    ("GH200", "gh200"),  # before H200, which it contains
    ("GB200", "gb200"),  # before B200
    ("B200", "b200"),
    ("H800", "h800"),
    ("A100-SXM4-80GB", "a100-sxm-80gb"),
    ("A100-SXM4-40GB", "a100-sxm-40gb"),
    ("A100 80GB PCIe", "a100-pcie-80gb"),
    ("A100-PCIE-40GB", "a100-pcie-40gb"),
    ("A10G", "a10g"),
    ("H100 80GB HBM3", "h100-sxm"),
    ("H100-SXM", "h100-sxm"),
    ("H200", "h200-sxm"),
    ("H20", "h20"),  # after H200, which contains it
    ("V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("V100-SXM2-32GB", "v100-sxm2-32gb"),
)


def _family(gpu: str) -> str:
    return gpu.split("-")[0]


def infer_gpu(capture: Capture, gpu: str | None = None) -> str:
    """The device spec for the capture's GPUs: ``gpu`` if given, else the ``nvidia-smi -L`` line."""
    if gpu:
        if gpu not in device_names():
            raise SpecError(f"{capture.source}: unknown GPU {shown(gpu)}; known: {', '.join(device_names())}")
        return gpu
    for product, spec in _PRODUCTS:
        if product.lower() in capture.gpu_product.lower():
            return spec
    found = f" ({shown(capture.gpu_product)} is not recognised)" if capture.gpu_product else ""
    raise SpecError(
        f"{capture.source}: cannot tell the GPU model{found}; pass it (--gpu / gpu:), one of "
        f"{', '.join(n for n in device_names() if device_spec(n).kind == 'gpu')}"
    )


def _groups(devices: Iterable[str], related: Callable[[str, str], bool]) -> list[list[str]]:
    """Connected groups of ``devices`` under the symmetric relation ``related(a, b)``."""
    parent = {d: d for d in devices}

    def root(d: str) -> str:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    items = list(parent)
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if related(a, b):
                parent[root(b)] = root(a)
    order: dict[str, list[str]] = {}
    for d in items:
        order.setdefault(root(d), []).append(d)
    return list(order.values())


def _local(device: str, capture: Capture) -> str:
    return f"gpu{device[3:]}" if device.startswith("GPU") else f"nic{capture.nics.index(device)}"


def _link(a: str, b: str, cls: str, kind: str, bandwidth: float, latency: float) -> LinkDecl:
    return LinkDecl(a, b, cls, kind, bandwidth, latency)


def _pcie_structure(capture: Capture, pcie_bw: float) -> tuple[list[DeviceDecl], list[LinkDecl]]:
    cells = capture.cells

    def within(*classes: str) -> Callable[[str, str], bool]:
        return lambda a, b: cells[a, b] in classes

    def same_numa(a: str, b: str) -> bool:
        na, nb = capture.numa.get(a), capture.numa.get(b)
        return cells[a, b] in ("PIX", "PXB", "PHB", "NODE") or (na is not None and na == nb)

    devices: list[DeviceDecl] = []
    links: list[LinkDecl] = []
    numa_groups = _groups(capture.devices, same_numa)
    bridges = _groups(capture.devices, within("PIX", "PXB", "PHB"))
    switches = [g for g in _groups(capture.devices, within("PIX", "PXB")) if len(g) > 1]
    for k, _ in enumerate(numa_groups):
        devices.append(DeviceDecl(f"cpu{k}", "cpu"))
    for i in range(len(numa_groups)):
        for j in range(i + 1, len(numa_groups)):
            links.append(_link(f"cpu{i}", f"cpu{j}", "smp", "smp", _SMP_BPS, 0.3e-6))
    for k, bridge in enumerate(bridges):
        devices.append(DeviceDecl(f"pcie{k}", "pcie"))
        numa = next(i for i, g in enumerate(numa_groups) if bridge[0] in g)
        links.append(_link(f"pcie{k}", f"cpu{numa}", "host-bridge", "memory", 4 * pcie_bw, 0.2e-6))
    switch_of = {d: s for s, members in enumerate(switches) for d in members}
    for s, _ in enumerate(switches):
        devices.append(DeviceDecl(f"pcisw{s}", "pcie"))
        parent = next(k for k, g in enumerate(bridges) if switches[s][0] in g)
        links.append(_link(f"pcisw{s}", f"pcie{parent}", "pcie-x16", "pcie", pcie_bw, 0.75e-6))
    for dev in capture.devices:
        up = (
            f"pcisw{switch_of[dev]}"
            if dev in switch_of
            else f"pcie{next(k for k, g in enumerate(bridges) if dev in g)}"
        )
        links.append(_link(_local(dev, capture), up, "pcie-x16", "pcie", pcie_bw, 0.75e-6))
    return devices, links


def _nvlink_structure(capture: Capture, gpu: str) -> tuple[list[DeviceDecl], list[LinkDecl]]:
    gpus = capture.gpus
    counts = {a: [capture.nvlinks(a, b) for b in gpus if b != a] for a in gpus}
    if not any(any(c) for c in counts.values()):
        return [], []
    per_gpu = _NVLINKS_PER_GPU.get(_family(gpu), 18)
    per_link = _NVLINK_PER_LINK_BPS.get(_family(gpu), NVLINK_PER_LINK_BPS)
    for a in gpus:
        for b in gpus:
            if capture.nvlinks(a, b) > per_gpu:
                raise SpecError(
                    f"{capture.source}: {a} -> {b} is {capture.cells[a, b]}, but a {gpu} GPU has "
                    f"{per_gpu} NVLinks in all (NVIDIA datasheet); is the capture from another GPU model?"
                )
    if any(sum(c) > per_gpu for c in counts.values()):
        widest = max(max(c) for c in counts.values())
        reduction = "nvls" if _family(gpu) in _NVLS_FAMILIES else ""
        switch = DeviceDecl("nvswitch", "switch", in_network_reduction=reduction)
        links = [
            _link(_local(g, capture), "nvswitch", "nvswitch", "nvswitch", widest * per_link, 0.5e-6)
            for g in gpus
            if any(counts[g])
        ]
        return [switch], links
    links = [
        _link(
            _local(a, capture),
            _local(b, capture),
            f"nvlink-x{capture.nvlinks(a, b)}",
            "nvlink",
            capture.nvlinks(a, b) * per_link,
            1e-6,
        )
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if capture.nvlinks(a, b)
    ]
    return [], links


def capture_node_type(
    capture: Capture, name: str, *, gpu: str | None = None, nic_port_Bps: float | None = None
) -> NodeType:
    """The node type a capture describes; ``nic_port_Bps`` defaults by GPU generation (see module doc)."""
    spec = infer_gpu(capture, gpu)
    if nic_port_Bps is not None:
        try:
            physical_range("nic_port").check(nic_port_Bps, f"{capture.source}: NIC port")
        except TrainsimError as exc:
            raise SpecError(str(exc)) from None
    pcie_bw = _PCIE_X16_BPS.get(_family(spec), 31.5e9)
    port = nic_port_Bps or _NIC_PORT_BPS.get(_family(spec), 12.5e9)
    devices = [DeviceDecl(_local(g, capture), "gpu", spec=spec) for g in capture.gpus]
    devices += [DeviceDecl(_local(n, capture), "nic", port_Bps=port) for n in capture.nics]
    pcie_devices, pcie_links = _pcie_structure(capture, pcie_bw)
    nv_devices, nv_links = _nvlink_structure(capture, spec)
    devices += pcie_devices + nv_devices
    links = pcie_links + nv_links
    if not capture.nics:
        devices.append(DeviceDecl("nic0", "nic", port_Bps=port))
        links.append(_link("nic0", "pcie0", "pcie-x16", "pcie", pcie_bw, 0.75e-6))
    ranks = tuple(_local(g, capture) for g in capture.gpus)
    return NodeType(name, tuple(devices), tuple(links), ranks, f"nvidia-smi topo -m capture {capture.source}")


def capture_cluster_spec(
    capture: Capture, name: str, *, gpu: str | None = None, nic_port_Bps: float | None = None, nodes: int = 1
) -> ClusterSpec:
    """``nodes`` hosts like the captured one on a leaf-spine (InfiniBand if the capture lists NICs)."""
    node_type = capture_node_type(capture, name, gpu=gpu, nic_port_Bps=nic_port_Bps)
    check_node_counts({name: node_type}, [(name, nodes)], f"{capture.source}: nodes={nodes}")
    ib = bool(capture.nics)
    fabric = FabricSpec(
        type="leaf-spine",
        link_kind="ib" if ib else "ethernet",
        nic_latency_s=1e-6 if ib else 10e-6,
        switch_latency_s=0.3e-6 if ib else 2e-6,
        source="assumed for a capture: non-blocking leaf-spine (estimates as in the presets)",
    )
    return ClusterSpec(name, MappingProxyType({name: node_type}), ((name, nodes),), fabric)


def load_capture_spec(
    path: Path | str, *, gpu: str | None = None, nic_port_Bps: float | None = None
) -> ClusterSpec:
    """A one-host cluster spec from the capture in ``path``."""
    return capture_cluster_spec(read_capture(path), Path(path).stem, gpu=gpu, nic_port_Bps=nic_port_Bps)
