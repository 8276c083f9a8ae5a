"""Command-line pieces for the cluster a command runs on: ``--cluster`` (alias ``--topology``),
``--gpus``, ``--nodes`` and ``--fabric``, shared by every entry point that takes a cluster, and the
network what-ifs ``--nic-bandwidth``, ``--nics-per-node`` and ``--oversubscription``
(:mod:`topologies.network`).

The bound on GPUs (:data:`MAX_GPUS`) keeps a typo from building a cluster the simulator cannot
hold: 16,384 GPUs of a preset take about 16 s and 0.5 GB to build and simulate one collective on
(measured with ``python -m experiments.nccl_sim --gpus 16384`` on one core), and every larger
count grows from there.
"""

from __future__ import annotations

import argparse
import functools

from simcore.cliargs import int_list, int_range
from simcore.limits import DEVICES_PER_NODE
from simcore.topology import ClusterLoader
from topologies import load_cluster
from topologies.catalog import preset_names
from topologies.network import NetworkOverrides, network_overrides
from topologies.spec import FABRIC_TYPES

__all__ = [
    "MAX_GPUS",
    "MAX_NODES",
    "add_cluster",
    "add_fabric",
    "add_gpus",
    "add_network",
    "add_nodes",
    "cluster_help",
    "network_from_args",
    "network_loader",
]

MAX_GPUS = 32768
MAX_NODES = 4096


def cluster_help(several: bool = False) -> str:
    names = "preset name(s), comma-separated," if several else "preset name"
    return (
        f"{names} or a cluster file (YAML, or nvidia-smi topo -m .txt); presets: {', '.join(preset_names())}"
    )


def add_cluster(
    parser: argparse.ArgumentParser,
    default: str | None,
    *,
    several: bool = False,
    topology_alias: bool = False,
    required: bool = False,
    dest: str = "cluster",
    help: str | None = None,
) -> None:
    """``--cluster`` (``--topology`` too where a command took that before); value kept as given."""
    flags = ("--cluster", "--topology") if topology_alias else ("--cluster",)
    parser.add_argument(
        *flags, dest=dest, default=default, required=required, metavar="CLUSTER",
        help=help or cluster_help(several),
    )  # fmt: skip


def add_gpus(
    parser: argparse.ArgumentParser, default: str | None, *, several: bool = False, help: str
) -> None:
    """``--gpus N`` (or ``N,M,...`` when ``several``), 1..:data:`MAX_GPUS` each."""
    kind = int_list(1, MAX_GPUS) if several else int_range(1, MAX_GPUS)
    parser.add_argument("--gpus", type=kind, default=default, help=help)


def add_nodes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nodes", type=int_range(1, MAX_NODES), default=None, help="number of servers of the preset"
    )


def add_fabric(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fabric",
        choices=(*FABRIC_TYPES, "rail-optimized", "rail"),
        default=None,
        help="override the cluster's fabric layout",
    )


def add_network(parser: argparse.ArgumentParser) -> None:
    """``--nic-bandwidth RATE``, ``--nics-per-node N``, ``--oversubscription R``: network what-ifs."""
    g = parser.add_argument_group("network what-ifs (any cluster, no YAML edit)")
    g.add_argument(
        "--nic-bandwidth", metavar="RATE", default=None,
        help="every NIC's port speed per direction, e.g. 800Gb/s or 100GB/s",
    )  # fmt: skip
    g.add_argument(
        "--nics-per-node", metavar="N", type=int_range(1, DEVICES_PER_NODE.limit), default=None,
        help="NICs in every node, placed where the node's own NICs are (topologies/network.py)",
    )  # fmt: skip
    g.add_argument(
        "--oversubscription", metavar="R", default=None,
        help="fabric leaf downlink : uplink capacity, e.g. 2 or 2:1 (1 is non-blocking)",
    )  # fmt: skip


def network_from_args(args: argparse.Namespace) -> NetworkOverrides:
    """The checked overrides the :func:`add_network` flags give (a TrainsimError on a bad value)."""
    return network_overrides(args.nic_bandwidth, args.nics_per_node, args.oversubscription)


def network_loader(network: NetworkOverrides) -> ClusterLoader:
    """``load_cluster`` with ``network`` applied to every cluster it builds."""
    if not network.given:
        return load_cluster
    return functools.partial(load_cluster, network=network)
