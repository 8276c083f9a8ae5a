"""Read ``nvidia-smi topo -m`` captures: the tab-separated connection matrix of one host.

What a capture looks like (newer drivers)::

    <TAB>GPU0<TAB>GPU1<TAB>NIC0<TAB>CPU Affinity<TAB>NUMA Affinity<TAB>GPU NUMA ID
    GPU0<TAB> X <TAB>NV12<TAB>PXB<TAB>48-63<TAB>3<TAB>N/A
    ...
    NIC Legend:
      NIC0: mlx5_0

Cells, nearest first: ``X`` (self), ``NV#`` (# bonded NVLinks), ``PIX`` (one PCIe bridge), ``PXB``
(several bridges), ``PHB`` (through a host bridge), ``NODE`` (between host bridges of one NUMA node),
``SYS`` (across the SMP link; old drivers print ``SOC``). Headers may carry ANSI escape codes; old
drivers name NIC columns ``mlx5_0`` and print no NIC legend or NUMA column; NIC rows have empty
affinity cells. A pasted capture that lost a tab shows fused cells (``PXBNODE``): those are
rejected with their line number rather than guessed. Lines such as ``GPU 0: NVIDIA A100-SXM4-80GB
(UUID: ...)`` (``nvidia-smi -L``) before the matrix name the GPU model. The file may be UTF-8 or
carry a byte-order mark (Windows PowerShell 5's ``>`` writes UTF-16); an ``NV#`` cell above 18, the
most NVLinks any GPU has (H100 SXM), is refused with that range and its source.

:mod:`topologies.nvsmi_graph` turns a parsed capture into a node type and a cluster spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simcore.errors import TrainsimError
from simcore.limits import DEVICES_PER_NODE, physical_range
from topologies.yamlcheck import SpecError, check_bound, name_field, read_text_file, shown

__all__ = ["CONNECTIONS", "Capture", "parse_capture", "read_capture"]

CONNECTIONS = ("X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_CLASSES = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NVLINK = re.compile(r"NV(\d+)")
_GPU_LINE = re.compile(r"GPU (\d+): (.+?) \(UUID")
_LEGEND = re.compile(r"(NIC\d+):\s*(\S+)")
_MULTIWORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclass(frozen=True, slots=True)
class Capture:
    """One host's matrix: devices in column order, the cell for every ordered pair, affinities."""

    devices: tuple[str, ...]
    cells: dict[tuple[str, str], str]  # "NV12", "PIX", ... ("SOC" normalised to "SYS")
    numa: dict[str, int | None]  # GPU -> NUMA node from the NUMA Affinity column
    nic_names: dict[str, str]  # NIC0 -> mlx5_0 (from the legend; identity for old drivers)
    gpu_product: str = ""  # from "GPU 0: NVIDIA ... (UUID" lines, if present
    source: str = ""

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    def nvlinks(self, a: str, b: str) -> int:
        """Bonded NVLinks between two devices (0 if they talk over PCIe)."""
        match = _NVLINK.fullmatch(self.cells[a, b])
        return int(match[1]) if match else 0


def _clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r\n")


def _header(lines: list[str], where: str) -> tuple[int, list[str], list[str]]:
    """Index of the header line, its device columns and its affinity columns."""
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.split("\t")]
        if "GPU0" in cells:
            break
        if re.search(r"(^|\s)GPU0(\s|$)", line):
            raise SpecError(
                f"{where}: line {i + 1}: the matrix header is not tab-separated; "
                "save the capture directly (nvidia-smi topo -m > topo.txt) so its tabs survive"
            )
    else:
        raise SpecError(f"{where}: no nvidia-smi topo -m matrix found (expected a header row with GPU0)")
    if cells and cells[0] == "":
        cells = cells[1:]
    devices: list[str] = []
    affinity: list[str] = []
    for cell in cells:
        if affinity or " " in cell or cell in _MULTIWORD:
            affinity.append(cell)
        elif cell:
            devices.append(name_field(cell, f"{where}: line {i + 1}: a device column"))
    if len(set(devices)) != len(devices):
        raise SpecError(f"{where}: line {i + 1}: a device column is repeated")
    check_bound(DEVICES_PER_NODE, len(devices), f"{where}: line {i + 1}", "the header")
    return i, devices, affinity


def _cell(raw: str, row: str, col: str, where: str) -> str:
    token = raw.strip()
    if row == col:
        if token != "X":
            raise SpecError(f"{where}: row {row}, column {col} is {shown(token)}; the diagonal must be X")
        return "X"
    match = _NVLINK.fullmatch(token)
    if match:
        try:
            physical_range("nvlinks").check(int(match[1]), f"{where}: row {row}, column {col}", token)
        except TrainsimError as exc:
            raise SpecError(str(exc)) from None
        return f"NV{int(match[1])}"
    if token in _CLASSES:
        return "SYS" if token == "SOC" else token
    fused = any(token.startswith(c) and token != c for c in (*_CLASSES, "NV"))
    hint = (
        ("; it looks like two fused cells (a paste that lost a tab): save the capture again with its tabs")
        if fused
        else ""
    )
    raise SpecError(
        f"{where}: row {row}, column {col}: {shown(token)} is not a connection; "
        f"allowed: {', '.join(CONNECTIONS)}{hint}"
    )


def _rows(
    lines: list[str], start: int, devices: list[str], affinity: list[str], where: str
) -> tuple[dict[tuple[str, str], str], dict[str, int | None]]:
    n = len(devices)
    cells: dict[tuple[str, str], str] = {}
    numa: dict[str, int | None] = {}
    seen: list[str] = []
    for i in range(start + 1, len(lines)):
        parts = lines[i].split("\t")
        name = parts[0].strip()
        if not name or name.startswith("Legend"):
            break
        at = f"{where}: line {i + 1}"
        if name not in devices:
            raise SpecError(f"{at}: row {shown(name)} is not a column of the header ({', '.join(devices)})")
        row = parts[1:]
        for col, raw in zip(devices, row[:n], strict=False):
            cells[name, col] = _cell(raw, name, col, at)
        if len(row) < n:
            raise SpecError(
                f"{at}: row {name} has {len(row)} cells, expected {n} (one per column "
                f"{devices[0]}..{devices[-1]})"
            )
        extra = dict(zip(affinity, (c.strip() for c in row[n:]), strict=False))
        numa_text = extra.get("NUMA Affinity", "")
        numa[name] = int(numa_text) if re.fullmatch(r"[0-9]{1,9}", numa_text) else None
        seen.append(name)
    missing = [d for d in devices if d not in seen]
    if missing:
        raise SpecError(f"{where}: no row for {', '.join(missing)} (the matrix must be square)")
    return cells, numa


def parse_capture(text: str, where: str) -> Capture:
    """Parse one capture; every error names ``where`` and the line or cell at fault."""
    lines = [_clean(line) for line in text.splitlines()]
    start, devices, affinity = _header(lines, where)
    if not any(d.startswith("GPU") for d in devices):
        raise SpecError(f"{where}: line {start + 1}: no GPU columns")
    cells, numa = _rows(lines, start, devices, affinity, where)
    for a in devices:
        for b in devices:
            if a < b and cells[a, b] != cells[b, a]:
                raise SpecError(
                    f"{where}: {a} -> {b} is {cells[a, b]} but {b} -> {a} is {cells[b, a]}; "
                    "a capture is symmetric"
                )
    legend = {m[1]: m[2] for line in lines[start:] for m in [_LEGEND.fullmatch(line.strip())] if m}
    nic_names = {d: legend.get(d, d) for d in devices if not d.startswith("GPU")}
    products = [m[2] for line in lines[:start] for m in [_GPU_LINE.search(line)] if m]
    return Capture(tuple(devices), cells, numa, nic_names, products[0] if products else "", where)


def read_capture(path: Path | str) -> Capture:
    """Parse the capture in ``path``."""
    path = Path(path)
    return parse_capture(read_text_file(path, "an nvidia-smi topo -m capture (text)"), str(path))
