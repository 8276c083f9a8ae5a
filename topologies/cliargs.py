"""Command-line pieces for the cluster a command runs on: ``--cluster`` (alias ``--topology``),
``--gpus``, ``--nodes`` and ``--fabric``, shared by every entry point that takes a cluster.

The bound on GPUs (:data:`MAX_GPUS`) keeps a typo from building a cluster the simulator cannot
hold: 16,384 GPUs of a preset take about 16 s and 0.5 GB to build and simulate one collective on
(measured with ``python -m experiments.nccl_sim --gpus 16384`` on one core), and every larger
count grows from there.
"""

from __future__ import annotations

import argparse

from simcore.cliargs import int_list, int_range
from topologies.catalog import preset_names
from topologies.spec import FABRIC_TYPES

__all__ = ["MAX_GPUS", "MAX_NODES", "add_cluster", "add_fabric", "add_gpus", "add_nodes", "cluster_help"]

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
