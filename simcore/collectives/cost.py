"""The cost model: one (algorithm, protocol) pair's time for a size, in NCCL's structure.

For every phase of a unit plan (:mod:`simcore.collectives.plan`):

    latency   = base[pattern][proto] + intra * hop[class][pattern][proto] + inter * (hop[net] + fabric)
                + pattern's fixed term; a multi-node Simple ring all-reduce pays NCCL's 1.4x plateau
    bandwidth = max(link time of the unit plan * size / efficiency, size / protocol throughput cap)
    phase     = max(latency, launch floor) + pipeline fill + bandwidth

where the link time is the most loaded link's bytes over its usable rate (measured on the actual
routes), ``efficiency`` is the protocol's fraction of that rate (LL's flag bytes, LL128's 120/128,
trees' 0.92; NCCL's medium-size tree correction stands in for the pipeline fill in NCCL's own
model, so only :func:`tuner_time_s` applies it) and the cap is NCCL's per-channel throughput
limit of the protocol (LL's llMaxBw, LL128 and tree caps per channel). Ring intra-node steps of a
multi-node ring are no faster than NCCL's per-step network post overhead. CPU (gloo) groups use
the plain alpha-beta model: steps x (slowest route latency + a software step), Simple only, every
link at its full rate.

NCCL picks an (algorithm, protocol) pair by its own prediction, latency + bytes / bandwidth, which
has no pipeline fill (it derates trees at medium sizes instead) and, where the network plugin
reports a latency for its device, adds that figure to every node-crossing hop (twice for Simple)
instead of the fabric's. :func:`tuner_time_s` is this model's time seen that way; it ranks the
candidates (:mod:`simcore.collectives.selection`) and never prices one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from simcore.collectives.group import GroupInfo
from simcore.collectives.options import NcclOptions
from simcore.collectives.pipeline import fill_s
from simcore.collectives.plan import FABRIC_KINDS, STEP_OVERHEAD_S, Edge, Hops, Phase, Plan, Transfer
from simcore.collectives.tuning import (
    arch_param,
    base_latency_us,
    efficiency,
    hop_latency_us,
    latency_param,
    ll_max_busbw,
    node_index,
    protocols_of,
    tables,
    tree_correction,
)
from simcore.topology import Topology

__all__ = [
    "PhaseCost",
    "allowed_protocols",
    "link_time_per_byte",
    "link_times",
    "materialize",
    "phase_costs",
    "plan_cost",
    "tuner_time_s",
]

_NVLINK_KINDS = frozenset({"nvlink", "nvswitch"})

_RING_LIKE = ("ring", "chain", "p2p", "nvls", "nvls_tree")


@dataclass(frozen=True, slots=True)
class PhaseCost:
    """One phase priced: latency, link-bound and protocol-bound bandwidth times (s), the worst link."""

    latency_s: float
    link_s: float
    engine_s: float
    bottleneck: Edge | None

    @property
    def time_s(self) -> float:
        return self.latency_s + max(self.link_s, self.engine_s)


def link_times(topology: Topology, phase: Phase) -> tuple[tuple[float, Edge | None], tuple[float, float]]:
    """One pass over the phase's links: (the most loaded link's time for its bytes - per byte of a
    unit plan - and that link), and (seconds per byte on the slowest intra-node link - NVLink where
    the phase uses any, else any non-fabric link - and on the slowest fabric link): the rates the
    pipeline fill prices its stages at."""
    succ = topology.graph._succ  # raw adjacency: networkx's edge views cost a call per lookup
    worst = 0.0
    worst_edge: Edge | None = None
    nvlink = fabric = other = 0.0
    for (u, v), load in phase.link_loads().items():  # insertion order is deterministic
        attrs = succ[u][v]
        per_byte = 1.0 / (float(attrs["bandwidth_Bps"]) * float(attrs.get("efficiency", 1.0)))
        t = load * per_byte
        if t > worst or (t == worst and worst_edge is not None and (u, v) < worst_edge):
            worst, worst_edge = t, (u, v)
        kind = attrs["kind"]
        if kind in FABRIC_KINDS:
            fabric = max(fabric, per_byte)
        elif kind in _NVLINK_KINDS:
            nvlink = max(nvlink, per_byte)
        else:
            other = max(other, per_byte)
    return (worst, worst_edge), ((nvlink if nvlink > 0 else other), fabric)


def link_time_per_byte(topology: Topology, phase: Phase) -> tuple[float, Edge | None]:
    """Time for the phase's most loaded link to carry its bytes (unit plan: per byte), and the link."""
    return link_times(topology, phase)[0]


def allowed_protocols(plan: Plan, info: GroupInfo, options: NcclOptions) -> tuple[str, ...]:
    """Protocols that can run ``plan``: the patterns' own, LL128 only over NVLink (and, across nodes,
    only on Hopper or where GPUs reach their NICs inside a PCIe switch), and what ``options`` allow."""
    if info.backend != "nccl":
        return ("Simple",)
    common: list[str] | None = None
    for phase in plan.phases:
        offered = list(protocols_of(phase.hops.pattern))
        common = offered if common is None else [p for p in common if p in offered]
    protos = common if common is not None else ["Simple"]
    ll128 = all(p.hops.nvlink for p in plan.phases) and info.ll128_net
    return tuple(p for p in protos if (p != "LL128" or ll128) and options.allows_protocol(p))


def _steps(op: str, ranks: int) -> int:
    if op == "all_reduce":
        return 2 * (ranks - 1)
    if op in ("all_gather", "reduce_scatter"):
        return ranks - 1
    return ranks


def _net_hop_us(hops: Hops, proto: str, info: GroupInfo) -> float:
    """One node-crossing hop: NCCL's network hop latency plus the fabric's own latency, which
    Simple pays twice (NCCL: "Also add the flush extra latency" - a GPUDirect flush read)."""
    # With one rank per node the network latency cannot hide behind intra-node steps: NCCL then
    # takes the tree's network latency for every algorithm.
    pattern = "tree" if info.ppn == 1 and hops.pattern != "pat" else hops.pattern
    fabric = hops.fabric_s * 1e6 * (2 if proto == "Simple" else 1)
    return hop_latency_us("net", pattern, proto) + fabric


def latency_s(hops: Hops, proto: str, info: GroupInfo, op: str, size: float) -> float:
    """The phase's latency for ``proto`` (NCCL's formula on the phase's hop counts)."""
    if info.backend != "nccl":
        return hops.steps * (hops.route_s + STEP_OVERHEAD_S)
    pattern = hops.pattern
    intra = hop_latency_us("nvlink" if hops.nvlink else "pci", pattern, proto)
    if hops.shm:
        intra += hops.intra_route_s * 1e6  # staged through host memory: the copy's path on top
    if info.multi_node and pattern == "ring":
        overhead = float(latency_param("net_overhead_us")[info.vendor])
        if proto == "Simple":
            overhead *= float(latency_param("net_overhead_simple_factor"))
        intra = max(intra, overhead)
    lat = base_latency_us(pattern, proto) + hops.intra * intra + hops.extra_s * 1e6
    if hops.inter:
        lat += hops.inter * _net_hop_us(hops, proto, info)
    plateau = latency_param("ring_plateau")
    per_channel = size / max(1, info.channels * info.ranks)
    ring_all_reduce = pattern == "ring" and proto == "Simple" and info.multi_node and op == "all_reduce"
    if ring_all_reduce and per_channel >= float(plateau["min_bytes_per_rank_channel"]):
        lat *= float(plateau["volta_factor"] if info.arch == "volta" else plateau["factor"])
    return max(lat, float(latency_param("launch_floor_us"))) * 1e-6


def _efficiency(pattern: str, proto: str, info: GroupInfo) -> float:
    """Fraction of the links' rate the protocol delivers (LL's flags, LL128's 120/128, trees' 0.92)."""
    return 1.0 if info.backend != "nccl" else efficiency(pattern, proto, not info.multi_node)


def _tuner_derating(pattern: str, proto: str, info: GroupInfo, op: str, size: float) -> float:
    """NCCL's medium-size tree correction (ncclTopoGetAlgoTime): its model's stand-in for the tree's
    pipeline fill, which the price counts itself (:func:`~simcore.collectives.pipeline.fill_s`)."""
    if info.backend == "nccl" and pattern == "tree" and op == "all_reduce":
        return tree_correction(proto, size)
    return 1.0


def _cap_busbw(pattern: str, proto: str, info: GroupInfo, size: float) -> float:
    """NCCL's throughput cap on the bus bandwidth (GB/s) of ``pattern`` with ``proto``; inf if none.
    Per-channel caps count the channels NCCL runs for ``size`` (:meth:`GroupInfo.channels_for`)."""
    arch, index, ch = info.arch, node_index(info.nodes), info.channels_for(pattern, proto, size)
    if proto == "LL" and pattern in ("ring", "chain", "p2p", "tree"):
        return ll_max_busbw(arch, info.nodes, info.vendor)
    if proto == "LL128" and pattern in ("ring", "chain", "p2p"):
        return ch * float(arch_param(arch, "ring_ll128_per_channel", [math.inf] * 3)[index])
    if pattern == "tree":
        key = "tree_ll128_per_channel" if proto == "LL128" else "tree_per_channel"
        return ch * float(arch_param(arch, key, [math.inf] * 3)[index])
    if pattern == "nvls_tree":
        per = float(arch_param(arch, "nvls_tree_per_channel", [0.0] * 3)[index])
        return int(arch_param(arch, "nvls_channels", 16)) * per if per > 0 else math.inf
    if proto == "Simple" and pattern in ("ring", "chain"):
        return float(arch_param(arch, "simple_max_busbw", math.inf))
    return math.inf


def _engine_s(pattern: str, proto: str, info: GroupInfo, op: str, size: float) -> float:
    """Time the protocol's throughput cap alone needs for ``size`` bytes (0 if uncapped)."""
    if info.backend != "nccl" or size <= 0 or info.ranks < 2:
        return 0.0
    cap = _cap_busbw(pattern, proto, info, size)
    if not math.isfinite(cap):
        return 0.0
    ratios = tables()["bandwidth"]["cap_ratio"]
    ratio = float(ratios[pattern]) if pattern in ratios else info.ranks / _steps(op, info.ranks)
    return size / (cap * 1e9 * ratio)


def phase_costs(
    plan: Plan,
    unit_links: Sequence[tuple[float, Edge | None]],
    proto: str,
    size: float,
    info: GroupInfo,
) -> list[PhaseCost]:
    """Every phase of unit ``plan`` priced for ``size`` bytes with ``proto``."""
    out = []
    for phase, (per_byte, edge) in zip(plan.phases, unit_links, strict=True):
        pattern = phase.hops.pattern
        if not phase.transfers:
            out.append(PhaseCost(0.0, 0.0, 0.0, None))
            continue
        eff = _efficiency(pattern, proto, info)
        out.append(
            PhaseCost(
                latency_s(phase.hops, proto, info, plan.op, size) + fill_s(phase, proto, size, info, eff),
                per_byte * size / eff,
                _engine_s(pattern, proto, info, plan.op, size),
                edge,
            )
        )
    return out


def plan_cost(costs: Sequence[PhaseCost]) -> tuple[float, Edge | None]:
    """Total time, and the link limiting the phase with the longest link time (None if nothing moves)."""
    total = sum(c.time_s for c in costs)
    limiting = max((c for c in costs if c.bottleneck is not None), key=lambda c: c.link_s, default=None)
    return total, None if limiting is None else limiting.bottleneck


def tuner_time_s(plan: Plan, costs: Sequence[PhaseCost], proto: str, size: float, info: GroupInfo) -> float:
    """The time NCCL's tuner predicts for ``plan`` with ``proto`` (ncclTopoGetAlgoTime: latency +
    bytes / bandwidth): the priced latency without the pipeline fill, each node-crossing hop at the
    network plugin's reported latency where it reports one (NCCL's ``graph->latencyInter``, added to
    the network hop in src/graph/tuning.cc, twice for Simple; :attr:`GroupInfo.tuner_net_latency_s`),
    and the priced bandwidth times NCCL's medium-size tree correction instead of the fill."""
    if info.backend != "nccl":
        return plan_cost(costs)[0]
    seen_s = info.tuner_net_latency_s if info.multi_node else None
    total = 0.0
    for phase, cost in zip(plan.phases, costs, strict=True):
        hops = phase.hops
        if not phase.transfers:
            continue
        as_seen = hops if seen_s is None or not hops.inter else replace(hops, fabric_s=seen_s)
        link = cost.link_s / _tuner_derating(hops.pattern, proto, info, plan.op, size)
        total += latency_s(as_seen, proto, info, plan.op, size) + max(link, cost.engine_s)
    return total


def materialize(plan: Plan, costs: Sequence[PhaseCost], proto: str, size: float, info: GroupInfo) -> Plan:
    """The runnable plan: unit transfers scaled to ``size`` on the wire, latency and floor filled in."""
    phases = []
    for phase, cost in zip(plan.phases, costs, strict=True):
        if not phase.transfers:
            phases.append(phase)
            continue
        eff = _efficiency(phase.hops.pattern, proto, info)
        scale = size / eff
        transfers = tuple(
            Transfer(t.src, t.dst, t.size_bytes * scale, t.route, t.latency_s) for t in phase.transfers
        )
        phases.append(replace(phase, transfers=transfers, latency_s=cost.latency_s, engine_s=cost.engine_s))
    return replace(plan, size_bytes=size, phases=tuple(phases), protocol=proto)
