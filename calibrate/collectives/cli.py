"""Collective sweep, nccl-tests style, under torchrun (gloo on CPU, NCCL on GPU) or on one process.

    python -m calibrate.collectives --nproc 2 --out runs/ -b 8 -e 1M -f 2   # two local ranks
    torchrun --nproc-per-node 2 -m calibrate.collectives --out runs/ -b 8 -e 1M -f 2
    python -m calibrate.collectives --out runs/ --ops all_reduce -e 64K      # a world of one

``--nproc N`` is the supported way on one machine: it starts torchrun with N ranks and supervises
it (:func:`calibrate.common.launcher.supervise`), so Ctrl-C or SIGTERM stops every rank with one
line and no traceback, and the ranks die with it. Under a torchrun you start yourself (several
nodes, a scheduler) the ranks still stop with one line, but what torchrun's own agent prints on
Ctrl-C (its traceback and shutdown log) is torch's.

For every group (the whole world, each node's ranks, one rank per node across nodes), op and size
from ``-b`` to ``-e`` by factor ``-f``: ``--warmup`` untimed iterations, then ``--repeats`` times
``--iters`` timed iterations. An iteration's time is the slowest rank's (a synchronous job waits for
it). Rank 0 prints nccl-tests' table as it goes (the same columns and busbw factors, so it can be
diffed with ``all_reduce_perf`` or read back by :mod:`calibrate.nccl_tests`) and appends one tidy
row per (op, size, group, repeat) to ``<out>/collectives.jsonl`` (``--csv`` adds a CSV copy),
flushed as it arrives, after a provenance record. ``--resume`` skips rows already in the file,
saying on stderr how many (and any torn row a killed run left, which it drops and measures again).
An ``--out`` already holding ``collectives.jsonl`` is refused without ``--resume`` or ``--force``
(see :mod:`calibrate.common.prereq`).

``--after-compute-ms MS`` (CPU ranks only) times each collective as a training step issues a
blocking one: before every timed iteration each rank computes (small matmuls) for ``MS``
milliseconds, counted from the end of the previous collective, so the ranks arrive together but
after a stretch of compute rather than straight from the last collective. FSDP2 on CPU blocks the
training thread in every all-gather and reduce-scatter between its units' compute, and on gloo such
a collective takes longer than the back-to-back ones of the plain sweep. Its rows carry
``after_compute_ms``; ``calibrate.fit`` fits them apart (the profile's
``collectives_after_compute``). Give such a sweep an ``--out`` of its own.

Sizes follow nccl-tests: for all_gather / reduce_scatter / alltoall the size is the whole
concatenated buffer, rounded down to a multiple of ranks x element size.
"""

from __future__ import annotations

import argparse
import math
import sys

from calibrate.collectives.options import (
    DEFAULT_OPS,
    DTYPE_NAMES,
    GROUPS,
    MAX_AFTER_COMPUTE_MS,
    MAX_ITERS,
    MAX_REPEATS,
    OPS,
    sweep_sizes,
)
from calibrate.common.launch import BACKENDS, launch_env, launch_rank
from calibrate.common.launcher import supervise
from calibrate.common.prereq import check_measurement_dir, require_torch
from calibrate.common.procs import die_with_launcher, exit_on_stop_signals
from simcore.cliargs import Parser, int_range, name_list, size_bytes
from simcore.errors import TrainsimError, cli_entry

__all__ = ["MAX_LOCAL_RANKS", "OPS", "main", "run_sweep", "sweep_sizes"]

MAX_LOCAL_RANKS = 256  # --nproc: ranks on one machine (a bound against a typo, not a limit of torchrun)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m calibrate.collectives", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs", help="folder for collectives.jsonl")
    p.add_argument("-b", "--minbytes", type=size_bytes(allow_zero=False), default="8",
                   help="smallest size, nccl-tests units (8, 1K, 1M)")  # fmt: skip
    p.add_argument("-e", "--maxbytes", type=size_bytes(allow_zero=False), default="1M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=int_range(2, 1024), default=2, help="size multiplier")
    p.add_argument("--ops", type=name_list(OPS, what="op"), default=",".join(DEFAULT_OPS),
                   help=f"comma-separated, from {', '.join(OPS)}")  # fmt: skip
    p.add_argument("--groups", type=name_list(GROUPS, what="group"), default="world,intra,inter",
                   help="comma-separated, from world, intra, inter")  # fmt: skip
    p.add_argument(
        "-n", "--iters", type=int_range(1, MAX_ITERS), default=20, help="timed iterations per repeat"
    )
    p.add_argument(
        "-w", "--warmup", type=int_range(0, MAX_ITERS), default=5, help="untimed iterations per size"
    )
    p.add_argument(
        "--repeats", type=int_range(1, MAX_REPEATS), default=3, help="repeats of the timed iterations"
    )
    p.add_argument("-d", "--dtype", default="float32", choices=DTYPE_NAMES)
    p.add_argument("--threads", type=int_range(1, 4096), default=None,
                   help="torch threads per rank (default: CPUs / local ranks)")  # fmt: skip
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help="process-group backend (default: nccl when CUDA is available, else gloo)")  # fmt: skip
    p.add_argument("--after-compute-ms", type=int_range(0, MAX_AFTER_COMPUTE_MS), default=0,
                   help="CPU ranks: compute this long before each timed collective, as training "
                        "issues blocking ones (default 0: back to back)")  # fmt: skip
    p.add_argument("--csv", action="store_true", help="also write collectives.csv")
    p.add_argument("--resume", action="store_true", help="skip (op, size, group, repeat) already in --out")
    p.add_argument("--force", action="store_true",
                   help="measure everything again, adding to the records already in --out")  # fmt: skip
    p.add_argument("--nproc", type=int_range(1, MAX_LOCAL_RANKS), default=None,
                   help="start this many local ranks under torchrun and supervise them (Ctrl-C: one "
                        "line, no launcher traceback; the supported way on one machine) (default: "
                        "none: this process is one rank, or one of the ranks torchrun started)")  # fmt: skip
    return p.parse_args(argv)


def _without_nproc(argv: list[str]) -> list[str]:
    """``argv`` less its ``--nproc N`` / ``--nproc=N`` (what each rank is given)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def _launch(args: argparse.Namespace, argv: list[str]) -> int:
    """``--nproc N``: torchrun with N local ranks, supervised; this process holds the --out lock
    for the whole job (its ranks are let in as part of this run, :class:`simcore.output.OutLock`)."""
    if launch_env() is not None:
        raise TrainsimError(
            "--nproc starts its own ranks: give it to a plain python -m calibrate.collectives, "
            "or leave it out under torchrun / srun"
        )
    require_torch("python -m calibrate.collectives")
    files = ("collectives.jsonl", "collectives.csv") if args.csv else ("collectives.jsonl",)
    check_measurement_dir(args.out, files, resume=args.resume, force=args.force)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               "-m", "calibrate.collectives", *_without_nproc(argv)]  # fmt: skip
    return supervise([command], math.inf, name="calibrate.collectives")


def run_sweep(args: argparse.Namespace) -> int:
    """Measure what ``args`` asks for (every rank runs this)."""
    # The sweep imports torch (~1.5 s): only once the options are known to be good, so --help is quick.
    from calibrate.collectives.sweep import run_sweep as sweep

    return sweep(args)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    args.sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor)
    if args.nproc is not None:
        return _launch(args, list(sys.argv[1:] if argv is None else argv))
    if launch_rank() == 0:  # the one rank that writes; checked before any rank joins the group
        files = ("collectives.jsonl", "collectives.csv") if args.csv else ("collectives.jsonl",)
        check_measurement_dir(args.out, files, resume=args.resume, force=args.force)
    die_with_launcher()  # a killed torchrun must not leave this rank appending records
    # Ctrl-C / SIGTERM: one line from rank 0, no traceback from any rank (armed before torch loads).
    # Only when this process is the command (argv None, as `python -m` runs it): the signal mask
    # armed here is inherited by every child a caller starts later, so a caller that runs main()
    # in its own process (a test, a library user) must not have its SIGINT / SIGTERM taken.
    if argv is None:
        exit_on_stop_signals(launch_rank(), lambda: _interrupted_line(args.out))
    return run_sweep(args)


def _interrupted_line(out: str) -> str:
    return (
        f"interrupted: the measurements finished so far are kept in {out}/collectives.jsonl; "
        "--resume measures the rest"
    )


if __name__ == "__main__":
    raise SystemExit(main())
