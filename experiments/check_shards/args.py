"""The flags of ``python -m experiments.check_shards``: its parser alone, which ``--help`` builds
without importing the step model (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from experiments.common.args import add_batch
from simcore.cliargs import Parser, add_format, add_model, int_range
from topologies.cliargs import add_cluster, add_gpus

__all__ = ["DESCRIPTION", "build_parser"]

DESCRIPTION = "Check FSDP wrapping units against the model's blocks, and what a misaligned plan costs."


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.check_shards", description=DESCRIPTION)
    add_model(p, "llama2-7b")
    add_cluster(p, "dgx-a100")
    add_gpus(p, "16", help="data-parallel ranks")
    p.add_argument(
        "--wrap", default="per-block", help="per-block, every-N-layers, every-N-blocks, or layer indices"
    )
    add_batch(p, global_batch=32, micro_batch=1)
    p.add_argument(
        "--seq-len", type=int_range(1, 2**20), default=None, help="sequence length (default: the model's)"
    )
    p.add_argument("--prefetch", type=int_range(0, 1024), default=1, help="FSDP prefetch depth in units")
    add_format(p, ("table", "json"))
    return p
