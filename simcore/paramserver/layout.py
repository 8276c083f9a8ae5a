"""Which parameters live on which server shard, and which device runs each shard.

Sharding is greedy by layer and by bytes, as TensorFlow's ``GreedyLoadBalancingStrategy``
(``tf.compat.v1.train.replica_device_setter``) places variables: layers are taken in model order
and each goes whole to the shard holding the fewest bytes so far (ties: the lowest shard index).
A layer is never split, so shards are uneven when a few layers are large (a vocabulary embedding):
:attr:`ShardLayout.imbalance` (hot-shard bytes / mean shard bytes) says by how much, and the hot
shard's links and update time set the pace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError
from simcore.paramserver.config import Placement

if TYPE_CHECKING:
    from simcore.topology import ClusterLoader, Topology
    from simcore.workload.types import Workload

__all__ = ["ShardLayout", "default_shards", "load_ps_cluster", "server_devices", "shard_layers"]


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """The shard of every layer (-1 for layers without parameters) and the parameters per shard."""

    layer_shard: tuple[int, ...]
    shard_params: tuple[int, ...]

    @property
    def shards(self) -> int:
        return len(self.shard_params)

    @property
    def imbalance(self) -> float:
        """Hot-shard parameters over the mean per shard (1.0 = perfectly even)."""
        total = sum(self.shard_params)
        return max(self.shard_params) * self.shards / total if total else 1.0


def shard_layers(workload: Workload, shards: int) -> ShardLayout:
    """Greedy least-loaded placement of whole layers on ``shards`` shards (see the module docstring)."""
    if shards < 1:
        raise TrainsimError(f"--ps-shards must be >= 1, got {shards}")
    loads = [0] * shards
    layer_shard = []
    for layer in workload.layers:
        if layer.params <= 0:
            layer_shard.append(-1)
            continue
        target = min(range(shards), key=lambda s: (loads[s], s))
        loads[target] += layer.params
        layer_shard.append(target)
    return ShardLayout(tuple(layer_shard), tuple(loads))


def load_ps_cluster(cluster: str, workers: int, placement: Placement, *, loader: ClusterLoader) -> Topology:
    """The cluster for ``workers`` workers, plus the server nodes a dedicated placement needs.

    Ranks ``0..workers-1`` are the workers; with ``dedicated:N`` the ranks after them are the
    devices of the N server nodes. A cluster of one server type (a preset, or a spec file with one
    node type) grows to the nodes the workers fill plus N, however few workers there are: the
    server count comes from the type's own devices per server, never from a truncated cluster's. A
    cluster that mixes server types (or an explicit graph) cannot grow: its file must list the
    server nodes after the workers' nodes. ``loader`` builds the cluster (``topologies.load_cluster``).
    """
    if placement.kind == "colocated":
        return loader(cluster, gpus=workers)
    as_given = loader(cluster)
    per_server = _ranks_per_server(as_given)
    if per_server:
        worker_nodes = max(1, math.ceil(workers / per_server))
        full = loader(cluster, nodes=worker_nodes + placement.server_nodes)
    else:
        full = as_given
    if workers > full.world_size:
        raise TrainsimError(
            f"{cluster}: {workers} workers do not fit; the cluster has {full.world_size} devices"
        )
    worker_hosts = sorted({full.host_of_rank(r) for r in range(workers)})
    spare = [h for h in full.hosts if h > worker_hosts[-1]][: placement.server_nodes]
    if len(spare) < placement.server_nodes:
        raise TrainsimError(
            f"{cluster}: dedicated:{placement.server_nodes} needs {placement.server_nodes} node(s) "
            f"after the {len(worker_hosts)} holding the {workers} workers; the cluster has "
            f"{len(spare)} (list server nodes last in the cluster file, or use colocated)"
        )
    server_ranks = [r for h in spare for r in full.ranks_on_host(h)]
    return full.subset([*range(workers), *server_ranks])


def _ranks_per_server(topology: Topology) -> int:
    """Devices per server of a cluster that can grow: one server type on a fabric (else 0).

    0 for a cluster that mixes server types, an explicit graph, or a server without a fabric
    (``fabric: none``: nothing joins a second node).
    """
    types = set(topology.metadata.get("host_types", []))
    if len(types) != 1 or "" in types or topology.metadata.get("fabric") == "none":
        return 0
    return len(topology.ranks_on_host(topology.hosts[0]))


def default_shards(topology: Topology, workers: int, placement: Placement) -> int:
    """Colocated: one shard per worker node (ps-lite's and MXNet's launchers start one server per
    machine); dedicated: one per device of the server nodes (each with its own NIC where it has one)."""
    if placement.kind == "colocated":
        return len({topology.host_of_rank(r) for r in range(workers)})
    return max(1, topology.world_size - workers)


def server_devices(topology: Topology, workers: int, shards: int, placement: Placement) -> tuple[str, ...]:
    """The device (graph node) that runs each shard; see :mod:`simcore.paramserver.config`."""
    if placement.kind == "colocated":
        ranks = [(j * workers) // shards if shards <= workers else j % workers for j in range(shards)]
        return tuple(topology.ranks[r] for r in ranks)
    by_host: dict[int, list[str]] = {}
    for rank in range(workers, topology.world_size):
        by_host.setdefault(topology.host_of_rank(rank), []).append(topology.ranks[rank])
    if placement.kind == "dedicated-cpu":
        sockets = {h: sorted(n for n, d in topology.graph.nodes(data=True) if d.get("kind") == "cpu" and d.get("host") == h)
                   for h in by_host}  # fmt: skip
        by_host = {h: names for h, names in sockets.items() if names}
    hosts = [by_host[h] for h in sorted(by_host)]
    if not hosts:
        raise TrainsimError(
            "dedicated placement: the cluster has no server nodes after the workers' "
            "(build it with simcore.paramserver.load_ps_cluster)"
        )
    return tuple(hosts[j % len(hosts)][(j // len(hosts)) % len(hosts[j % len(hosts)])] for j in range(shards))
