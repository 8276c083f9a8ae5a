"""The flags of ``python -m experiments.nccl_sim``: its parser alone, which ``--help`` builds without
importing the collectives or the topology builders (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, add_format, add_out, add_quiet, int_range, real_range, size_bytes
from topologies.cliargs import MAX_GPUS, add_cluster, add_fabric, add_gpus, add_network, add_nodes

__all__ = ["ALGO_CHOICES", "DATATYPES", "DESCRIPTION", "OPS", "PROTOCOLS", "build_parser"]

DESCRIPTION = "Simulated nccl-tests: the ``*_perf`` table for a collective on a simulated cluster."

# nccl-tests' type names and their sizes in bytes.
DATATYPES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
}
# simcore.collectives' names, literal so that --help imports no collective (a test holds them equal):
# OPS, every algorithm of ALGORITHMS sorted, PROTOCOLS.
OPS = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv", "all_to_all",
    "all_to_allv", "ps_push", "ps_pull",
)  # fmt: skip
ALGO_CHOICES = [
    "collnet_direct", "direct", "hierarchical", "nvls", "nvls_tree", "p2p", "pat", "ps", "ring", "tree",
]  # fmt: skip
PROTOCOLS = ("LL", "LL128", "Simple")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.nccl_sim", description=DESCRIPTION)
    add_cluster(p, "dgx-a100", topology_alias=True)
    add_gpus(p, None, help="ranks to place (default: one node of the preset)")
    add_nodes(p)
    add_fabric(p)
    add_network(p)
    p.add_argument("--op", default="all_reduce", choices=list(OPS), help="collective")
    p.add_argument("-b", "--minbytes", type=size_bytes(), default="32M", help="smallest size")
    p.add_argument("-e", "--maxbytes", type=size_bytes(), default="32M", help="largest size")
    p.add_argument(
        "-f", "--stepfactor", type=int_range(1, 2**20), default=1, help="multiply the size by this per step"
    )
    p.add_argument(
        "-i", "--stepbytes", type=size_bytes(), default="1M", help="add this per step when -f is 1"
    )
    p.add_argument("-d", "--datatype", default="float", choices=list(DATATYPES), help="element type")
    p.add_argument(
        "-r", "--root", type=int_range(0, MAX_GPUS), default=0, help="root rank for broadcast/reduce"
    )
    p.add_argument(
        "--algo", default=None, help=f"pin the algorithm (NCCL spellings too): {', '.join(ALGO_CHOICES)}"
    )
    p.add_argument("--proto", default=None, help=f"pin NCCL's protocol: {', '.join(PROTOCOLS)}")
    p.add_argument(
        "--skew", type=real_range(0.0, 1e6), default=1.0, help="all_to_allv: receive skew across ranks"
    )
    p.add_argument(
        "--mode", default="aggregate", choices=("aggregate", "per-step"), help="how flows are simulated"
    )
    p.add_argument("--calibration", default=None, help="calibration profile JSON (alpha-beta per collective)")
    add_format(p, ("table", "json"))
    add_out(
        p,
        "nccl_sim.json and report.html (bandwidth and time vs size per algorithm/protocol)",
        default_new=False,
    )
    p.add_argument(
        "--compare", metavar="LOG", help="a real nccl-tests log (text or -J JSON) drawn over the simulation"
    )
    add_quiet(p)
    return p
