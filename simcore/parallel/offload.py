"""CPU offload: what leaves the GPU, and what moving it over PCIe and updating on the CPU costs.

- ``optimizer`` (ZeRO-Offload, Ren et al. 2021; FSDP ``CPUOffload`` of the optimizer state): fp32
  master weights and moments live in host memory; after the last backward the gradients go to the
  host (overlapped with that backward), the host runs the update (CPU-Adam, bound by DRAM traffic:
  the bytes per parameter of a fused update (:func:`~simcore.compute.optimizer.optimizer_step_cost`; DeepSpeed's CPU Adam is one fused loop) over this GPU's
  share of the server's DRAM bandwidth) and the updated working copy comes back. The GPU's
  optimizer step and its state leave the device.
- ``params`` (FSDP ``CPUOffload(offload_params=True)``, ZeRO-Infinity's parameter offload): the
  parameters, gradients and optimizer state all live on the host; every micro-batch copies the
  rank's parameters in for forward and again for backward (prefetched, overlapped with compute)
  and its gradients out; the update runs on the host. The device keeps about two layers' working
  copies.
- ``activations`` (activation CPU offload, e.g. Megatron-Core's ``cpu_offloading``): saved
  activations go to the host during forward and come back during backward, overlapped with the
  passes; the device keeps about two layers' worth.

PCIe: the bandwidth of the route from a GPU to its nearest CPU, each link divided among the GPUs of
the server whose routes share it (DGX A100: two GPUs per PCIe switch uplink). Only what a copy takes
beyond the compute it overlaps is exposed.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcore.compute.optimizer import optimizer_step_cost
from simcore.net.routing import Router
from simcore.topology import Topology
from simcore.units import parse_bandwidth
from simcore.yamlload import safe_load

__all__ = ["OffloadEffect", "host_dram_share_Bps", "offload_effect", "pcie_bandwidth_Bps"]

_DATA = Path(__file__).parent / "data" / "offload.yaml"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    with _DATA.open(encoding="utf-8") as handle:
        return dict(safe_load(handle))


def pcie_bandwidth_Bps(topology: Topology, rank: int) -> float:
    """Bytes/s one GPU moves to or from host memory when every GPU of its server does the same."""
    host = topology.host_of_rank(rank)
    cpus = [n for n, a in topology.graph.nodes(data=True) if a.get("kind") == "cpu" and a.get("host") == host]
    if not cpus:
        return float("inf")
    router = Router.for_topology(topology)
    devices = [topology.ranks[r] for r in topology.ranks_on_host(host)]

    def nearest(device: str) -> tuple[tuple[str, str], ...]:
        return min((router.route(device, cpu) for cpu in cpus), key=len)

    routes = {device: nearest(device) for device in devices}
    users = Counter(edge for route in routes.values() for edge in route)
    own = routes[topology.ranks[rank]]
    if not own:
        return float("inf")
    return min(float(topology.graph.edges[e]["bandwidth_Bps"]) / users[e] for e in own)


def host_dram_share_Bps(topology: Topology, rank: int) -> float:
    """This GPU's share of its server's sustained DRAM bandwidth (see ``data/offload.yaml``)."""
    table = _table()
    host_type = str(topology.node(topology.ranks[rank]).get("host_type", ""))
    entry = table["hosts"].get(host_type, table["default"])
    gpus = len(topology.ranks_on_host(topology.host_of_rank(rank)))
    return parse_bandwidth(entry["dram_bandwidth"]) * float(table["sustained_fraction"]) / max(1, gpus)


@dataclass(frozen=True, slots=True)
class OffloadEffect:
    """Device memory changes, exposed seconds per micro-batch, seconds after the last backward
    (replacing the GPU's optimizer step) and the host memory one GPU's offload needs."""

    memory_delta: dict[str, float] = field(default_factory=dict)
    per_micro_fwd_s: float = 0.0
    per_micro_bwd_s: float = 0.0
    tail_s: float = 0.0
    host_bytes: float = 0.0


def offload_effect(
    mode: str,
    *,
    topology: Topology,
    rank: int,
    breakdown: dict[str, float],
    optimizer: str,
    optimizer_params: float,
    gpu_optimizer_s: float,
    param_bytes: float,
    micro_fwd_s: float,
    micro_bwd_s: float,
    activations_per_micro: float,
    largest_layer_params: float,
    largest_layer_activations: float,
    param_bytes_per_param: int,
) -> OffloadEffect:
    """The :class:`OffloadEffect` of ``mode`` for one rank (figures of that rank, per micro-batch)."""
    if mode == "none":
        return OffloadEffect()
    pcie = pcie_bandwidth_Bps(topology, rank)
    cpu_step = optimizer_params * _fused_bytes_per_param(optimizer) / host_dram_share_Bps(topology, rank)
    if mode == "activations":
        keep = 2.0 * largest_layer_activations
        moved = activations_per_micro / pcie
        return OffloadEffect(
            {"activations": -max(0.0, breakdown.get("activations", 0.0) - keep)},
            max(0.0, moved - micro_fwd_s),
            max(0.0, moved - micro_bwd_s),
            0.0,
            activations_per_micro,
        )
    grads_out = optimizer_params * param_bytes_per_param / pcie
    params_in = optimizer_params * param_bytes_per_param / pcie
    host_update = cpu_step + params_in - gpu_optimizer_s
    if mode == "optimizer":
        delta = {"optimizer": -breakdown.get("optimizer", 0.0)}
        return OffloadEffect(
            delta, 0.0, 0.0, max(0.0, grads_out - micro_bwd_s) + host_update, breakdown.get("optimizer", 0.0)
        )
    # params: everything but two layers' working copies leaves the device
    working = 2.0 * largest_layer_params * param_bytes_per_param
    delta = {
        "params": -max(0.0, breakdown.get("params", 0.0) - working),
        "grads": -breakdown.get("grads", 0.0),
        "optimizer": -breakdown.get("optimizer", 0.0),
    }
    fetch = param_bytes / pcie
    host = breakdown.get("params", 0.0) + breakdown.get("grads", 0.0) + breakdown.get("optimizer", 0.0)
    return OffloadEffect(
        delta,
        max(0.0, fetch - micro_fwd_s),
        max(0.0, fetch + grads_out - micro_bwd_s),
        cpu_step - gpu_optimizer_s,
        host,
    )


def _fused_bytes_per_param(optimizer: str) -> float:
    """Bytes a fused fp32 update moves per parameter (states, parameter and gradient)."""
    return optimizer_step_cost(optimizer, "fused", 1.0, 1, 4).bytes_moved
