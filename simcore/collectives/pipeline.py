"""Pipeline fill: the time NCCL's chunked pipelines need before their last chunk can leave.

NCCL cuts every channel's share of a collective into chunks (sizes per algorithm and protocol from
``src/enqueue.cc``, constants in ``simcore/data/nccl.yaml`` under ``pipeline``) and streams them
through the algorithm's stages: the chain of ranks inside each node and the tree levels between
nodes (a tree all-reduce goes up and back down), or NVLS's switch and network legs. Of a pipeline
of stages with per-chunk times t_1..t_k run on n chunks, the time is sum(t) + (n - 1) max(t): the
bandwidth term counts n max(t), so the fill is sum(t) - max(t).

A stage's time for one chunk is the time the links of its class (intra-node: NVLink / NVSwitch, or
PCIe where there is none; node-crossing: the fabric) need to carry one chunk on every concurrent
channel at once: chunk x concurrent x (that class's busiest link time per collective byte) /
protocol efficiency. Ring patterns stream every step over all links at once and have no separate
fill (their per-step latency is in the latency model); only trees and NVLS are pipelined here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from simcore.collectives.group import GroupInfo
from simcore.collectives.plan import Phase
from simcore.collectives.tuning import arch_param, tables

__all__ = ["chunk_bytes", "fill_s"]

PIPELINED = ("tree", "nvls", "nvls_tree")


def _cfg() -> Any:
    return tables()["pipeline"]


def _halve(size: float, chunk: float, per_chunk: float, rules: Sequence[Sequence[float]]) -> float:
    """NCCL's "halve while a channel gets fewer than factor x per_chunk chunks" loops, in order."""
    for factor, floor in rules:
        while size // (per_chunk * chunk) < factor and chunk > floor:
            chunk /= 2
    return chunk


def _drop(size: float, chunk: float, ops: float, rules: Sequence[Sequence[float]]) -> float:
    """NVLS's rules: below factor x ops x chunk bytes, a chunk above the floor drops to the floor."""
    for factor, floor in rules:
        if size < factor * ops * chunk and chunk > floor:
            chunk = float(floor)
    return chunk


def _nvls_ops(info: GroupInfo) -> int:
    """Concurrent NVLS operations: NVLS channels x heads (every rank of a node heads its shard)."""
    return int(arch_param(info.arch, "nvls_channels", 16)) * max(1, info.ppn)


def chunk_bytes(pattern: str, proto: str, size: float, info: GroupInfo) -> float:
    """The chunk NCCL streams through ``pattern``'s stages for an all-reduce of ``size`` bytes (0 if none)."""
    cfg = _cfg()
    if pattern == "tree":
        chunk = float(cfg["step_bytes"][proto])
        if proto == "Simple" and info.buffsize:
            chunk = info.buffsize / int(cfg["steps"])
        if proto == "LL128":
            nsteps = 1 + (int(math.log2(info.nodes)) if info.nodes > 1 else 0) + 0.1 * info.ppn
            rules = [[f * nsteps / info.ppn, m] for f, m in cfg["tree_ll128_rules"]]
            return _halve(size, chunk, info.channels_for("tree", proto, size) * 1.0, rules)
        return chunk
    nvls_chunk = float(info.nvls_chunk or cfg["nvls_chunk"])
    if pattern == "nvls":
        return _drop(size, nvls_chunk, _nvls_ops(info), cfg["nvls_rules"])
    if pattern == "nvls_tree":
        default_max = cfg["nvls_tree_max_chunk_4_nodes"] if info.nodes >= 4 else nvls_chunk
        chunk = min(nvls_chunk, float(info.nvls_tree_max_chunk or default_max))
        return _drop(size, chunk, _nvls_ops(info), cfg["nvls_tree_rules"])
    return 0.0


def fill_s(phase: Phase, proto: str, size: float, info: GroupInfo, efficiency: float) -> float:
    """The pipeline fill of ``phase`` (a unit plan's) for ``size`` bytes with ``proto``, in seconds."""
    hops = phase.hops
    if info.backend != "nccl" or hops.pattern not in PIPELINED or size <= 0 or info.ranks < 2:
        return 0.0
    if proto == "LL":
        # LL forwards line by line: each 16-byte line carries 8 data bytes and its flag, and a rank
        # passes a line on as soon as its flag reads valid (NVIDIA/nccl src/device/prims_ll.h,
        # readLL / storeLL inside recvReduceSend), so no chunk is stored before it is forwarded;
        # the per-hop cost is the protocol's hop latency, already in the latency term (hwLat).
        return 0.0
    ops = _nvls_ops(info) if hops.pattern != "tree" else info.channels_for("tree", proto, size)
    chunk = min(chunk_bytes(hops.pattern, proto, size, info), size / ops)
    if chunk <= 0:
        return 0.0
    intra_pb, net_pb = phase.stage_s_per_byte
    per_nic = ops / max(1, info.nics)  # channels (NVLS: operations) sharing each NIC
    intra = hops.intra
    if hops.pattern == "nvls_tree" and intra > 0:
        intra = float(_cfg()["nvls_tree_intra_stages"])  # the switch's reduce and broadcast legs
    stages = [
        (intra, chunk * ops * intra_pb / efficiency),
        (hops.inter, chunk * per_nic * net_pb / efficiency),
    ]
    used = [(n, t) for n, t in stages if n > 0 and t > 0]
    if not used:
        return 0.0
    return max(0.0, sum(n * t for n, t in used) - max(t for _, t in used))
