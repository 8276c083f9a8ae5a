"""Compute microbenchmarks: matmul by shape and dtype, memory bandwidth, layer fwd/bwd, comm slowdown.

    python -m calibrate.compute --out runs/ --threads 4
    torchrun --nproc-per-node 2 -m calibrate.compute --out runs/      # adds the comm/compute slowdown

Every rank measures at the same time (as they compute during training, sharing the node's CPUs or
memory system); rank 0's measurements are written, one row per (item, repeat), to
``<out>/compute.jsonl`` after a provenance record, flushed as they arrive (an ``--out`` already
holding ``compute.jsonl`` is refused without ``--resume`` or ``--force``: see
:mod:`calibrate.common.prereq`). Threads are set
explicitly (``--threads``; default: this process's CPUs shared evenly among the node's ranks) and
recorded in every row. Row kinds:

- ``matmul``: ``m x k @ k x n`` in one dtype; ``flops = 2 m n k``; ``achieved_flops = flops / time``.
- ``memory``: copy of a large tensor; ``bytes`` = read + written; ``bandwidth_Bps = bytes / time``.
- ``layer``: forward and backward of each layer kind the workload presets use (``layer_kind`` is the
  workload's kind: linear, attention, norm, conv, embedding, activation), with analytic FLOPs;
  ``--layers`` times forward again and again and backward over a retained graph, ``--step-layers``
  one forward and one backward per iteration as a training step runs them (``timing: step``).
- ``op_overhead``: a chain of ``ops`` tiny operators (one-element tensors with autograd), forward
  and backward (``phase``), for the framework's fixed cost per dispatched operator.
- ``slowdown``: a matmul timed alone and while an all_reduce runs (world > 1);
  ``slowdown = time_with_comm / time_alone``.

Times are elapsed (``--clock wall``) or, on a machine whose cores other jobs share, the timing
thread's CPU time (``--clock cpu``, one-thread CPU ranks; each timed row records its ``clock``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from calibrate.common.launch import BACKENDS, launch_rank
from calibrate.common.prereq import check_measurement_dir
from calibrate.common.procs import die_with_launcher
from calibrate.compute.options import LAYER_NAMES, MAX_MATMUL, MAX_TENSOR_BYTES
from simcore.cliargs import Parser, int_list, int_range, name_list, size_bytes
from simcore.errors import cli_entry

__all__ = ["main", "run_compute"]


def _none_or(convert: Callable[[str], list[Any]]) -> Callable[[str], list[Any]]:
    """An argparse list type that also takes ``none`` (an empty list: skip those benchmarks)."""

    def parse(text: str) -> list[Any]:
        return [] if text.strip() == "none" else convert(text)

    parse.__name__ = getattr(convert, "__name__", "list")
    return parse


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m calibrate.compute", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs", help="folder for compute.jsonl")
    p.add_argument("--threads", type=int_range(1, 4096), default=None,
                   help="torch threads per rank (default: CPUs / local ranks)")  # fmt: skip
    p.add_argument("--dtypes", default=None, help="comma-separated from fp32, tf32, fp16, bf16 "
                   "(default: fp32,bf16 on CPU; fp32,tf32,fp16,bf16 on GPU)")  # fmt: skip
    p.add_argument("--matmul-sizes", type=int_list(1, MAX_MATMUL), default="64,128,256,512",
                   help=f"square matmul sizes m=n=k, each 1..{MAX_MATMUL}")  # fmt: skip
    p.add_argument("--mem-bytes", type=size_bytes(allow_zero=False, high=MAX_TENSOR_BYTES), default="64M",
                   help="memory-probe tensor size")  # fmt: skip
    p.add_argument("--layers", type=_none_or(name_list(LAYER_NAMES, what="layer")), default=",".join(LAYER_NAMES),
                   help=f"comma-separated from {', '.join(LAYER_NAMES)}, or none")  # fmt: skip
    p.add_argument("--step-layers", type=_none_or(name_list(LAYER_NAMES, what="layer")), default="none",
                   help="layer benchmarks (as --layers) timed as a training step runs them: forward on a fresh "
                        "graph, then backward, every iteration (rows with timing 'step'); default none")  # fmt: skip
    p.add_argument("--layer-scale", type=int_range(1, 64), default=1,
                   help="multiply the layer benchmarks' widths by this")  # fmt: skip
    p.add_argument("--op-chains", type=_none_or(int_list(1, 100_000)), default="16,64,256",
                   help="chain lengths of the per-operator overhead benchmark, or none")  # fmt: skip
    p.add_argument("--slowdown-bytes", type=size_bytes(allow_zero=False, high=MAX_TENSOR_BYTES), default="4M",
                   help="all_reduce size for the slowdown probe (world > 1)")  # fmt: skip
    p.add_argument("-n", "--iters", type=int_range(1, 1_000_000), default=10, help="timed calls per repeat")
    p.add_argument("-w", "--warmup", type=int_range(0, 1_000_000), default=2, help="untimed calls per item")
    p.add_argument("--repeats", type=int_range(1, 1_000_000), default=3, help="repeats of the timed calls")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: elapsed time; cpu: the thread's CPU time, which other processes on shared "
                        "cores do not inflate (CPU ranks with --threads 1 only)")  # fmt: skip
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help="process-group backend (default: nccl when CUDA is available, else gloo)")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="skip (item, repeat) already in --out")
    p.add_argument("--force", action="store_true",
                   help="measure everything again, adding to the records already in --out")  # fmt: skip
    args = p.parse_args(argv)
    args.matmul_sizes = sorted(args.matmul_sizes)
    args.op_chains = sorted(args.op_chains)
    return args


def run_compute(args: argparse.Namespace) -> int:
    """Measure what ``args`` asks for (every rank runs this)."""
    # The benchmarks import torch (~1.5 s): only once the options are known to be good, so --help is quick.
    from calibrate.compute.measure import run_compute as measure

    return measure(args)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if launch_rank() == 0:  # the one rank that writes; checked before any rank joins the group
        check_measurement_dir(args.out, ("compute.jsonl",), resume=args.resume, force=args.force)
    die_with_launcher()  # a killed torchrun must not leave this rank appending records
    return run_compute(args)


if __name__ == "__main__":
    raise SystemExit(main())
