"""Simulated nccl-tests: the ``*_perf`` table for a collective on a simulated cluster.

    python -m experiments.nccl_sim --topology dgx-a100 --gpus 8 --op all_reduce -b 8 -e 1G -f 2

prints what ``all_reduce_perf -b 8 -e 1G -f 2 -g 8`` prints - header comments, then per size
``size(B) count type redop root`` and out-of-place / in-place ``time(us) algbw(GB/s)
busbw(GB/s) #wrong`` (in-place repeats the simulated numbers; ``#wrong`` is ``N/A`` since no data is
checked), then the ``# Avg bus bandwidth`` footer - so a simulated table can be diffed against a
measured one. busbw = algbw x factor, as nccl-tests: all_reduce 2(n-1)/n; reduce_scatter and
all_gather (n-1)/n; broadcast, reduce and send_recv 1. Sizes take nccl-tests' suffixes
(``8``, ``1K``, ``1M``, ``1G`` = powers of 1024); for all_gather / reduce_scatter the size is
the whole buffer and ``count`` is per rank, as nccl-tests prints them. Trailing ``#`` lines name
the simulated algorithm per size range and the bottleneck link of the largest size.

``--format json`` prints one document::

    {"format": "trainsim-nccl-sim", "version": 1, "topology": str, "ranks": int, "op": str,
     "type": str, "mode": "aggregate" | "per-step", "avg_busbw_GBps": float,
     "results": [{"size_bytes": int, "count": int, "type": str, "redop": str, "root": int,
                  "time_us": float, "algbw_GBps": float, "busbw_GBps": float,
                  "algorithm": str, "bottleneck_link": str, "closed_form_us": float}, ...]}

GB/s are 1e9 bytes/s. ``--cluster`` and ``--topology`` name the same flag. Bad input prints one
``error:`` line and exits with status 2; so does a ladder of more than :data:`MAX_SIZES` sizes, a
size over 1 PiB or more than 32,768 GPUs. A run over many ranks says what it simulates and shows
a progress bar per size on stderr (a terminal only; ``--quiet`` turns both off).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from experiments.common.finite import require_finite
from experiments.common.progress import bar, note
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile
from simcore.cliargs import Parser, add_format, add_quiet, int_range, size_bytes
from simcore.collectives import ALGORITHMS, OPS, CollectiveResult, busbw_factor, collective_time
from simcore.errors import TrainsimError, cli_entry
from simcore.topology import Topology
from topologies.cliargs import MAX_GPUS, add_cluster, add_fabric, add_gpus, add_nodes

__all__ = ["NcclRow", "main", "rows_for", "size_ladder"]

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
_REDOP = {"all_reduce": "sum", "reduce": "sum", "reduce_scatter": "sum", "ps_push": "sum"}
_ROOTED = ("broadcast", "reduce")
_PER_RANK_COUNT = ("all_gather", "reduce_scatter")
ALGO_CHOICES = sorted({name for algos in ALGORITHMS.values() for name in algos})
MAX_SIZES = 1024
# Sizes x ranks above which the run says what it will simulate and shows progress: one size of
# an all_reduce over 16,384 ranks takes ~16 s on one core (python -m experiments.nccl_sim --gpus 16384).
NOTE_RANK_SIZES = 8192


@dataclass(frozen=True, slots=True)
class NcclRow:
    """One size of the table: what nccl-tests prints plus what the simulation knows."""

    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    bottleneck_link: str
    closed_form_us: float


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.nccl_sim", description=__doc__.split("\n\n")[0])
    add_cluster(p, "dgx-a100", topology_alias=True)
    add_gpus(p, None, help="ranks to place (default: one node of the preset)")
    add_nodes(p)
    add_fabric(p)
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
    p.add_argument("--algo", default=None, choices=ALGO_CHOICES, help="pin the algorithm, as NCCL_ALGO")
    p.add_argument(
        "--mode", default="aggregate", choices=("aggregate", "per-step"), help="how flows are simulated"
    )
    p.add_argument("--calibration", default=None, help="calibration profile JSON (alpha-beta per collective)")
    add_format(p, ("table", "json"))
    add_quiet(p)
    return p


def ladder_length(min_bytes: int, max_bytes: int, factor: int, step_bytes: int) -> int:
    """How many sizes :func:`size_ladder` visits, without listing them."""
    if min_bytes == max_bytes:
        return 1
    if factor > 1:
        count, size = 1, min_bytes
        while size * factor <= max_bytes:
            size *= factor
            count += 1
        return count
    return (max_bytes - min_bytes) // step_bytes + 1


def size_ladder(min_bytes: int, max_bytes: int, factor: int, step_bytes: int) -> list[int]:
    """The sizes nccl-tests visits: min, min*f, ... <= max (or min, min+i, ... when f is 1).

    At most :data:`MAX_SIZES` sizes (nccl-tests' own default ladder, 8 B to 128 MB by 2, is 25).
    """
    if min_bytes > max_bytes:
        raise TrainsimError(
            f"-b {min_bytes} is larger than -e {max_bytes}; the smallest size must not exceed the largest"
        )
    if factor < 1:
        raise TrainsimError(f"-f must be >= 1, got {factor}")
    if factor > 1 and min_bytes == 0:
        raise TrainsimError("-b must be > 0 when -f multiplies the size")
    if factor == 1 and step_bytes <= 0 and min_bytes != max_bytes:
        raise TrainsimError("-i must be > 0 when -f is 1")
    count = ladder_length(min_bytes, max_bytes, factor, step_bytes)
    if count > MAX_SIZES:
        raise TrainsimError(
            f"-b {min_bytes} -e {max_bytes} with -f {factor} / -i {step_bytes} gives {count} sizes; at most "
            f"{MAX_SIZES}: use a larger -f or -i"
        )
    sizes = [min_bytes]
    while True:
        nxt = sizes[-1] * factor if factor > 1 else sizes[-1] + step_bytes
        if nxt > max_bytes or nxt == sizes[-1]:
            return sizes
        sizes.append(nxt)


def _row(
    op: str, size: int, word: int, dtype: str, ranks: int, root: int, result: CollectiveResult
) -> NcclRow:
    time_s = result.time_s
    algbw = size / 1e9 / time_s if time_s > 0 else 0.0
    count = size // word // ranks if op in _PER_RANK_COUNT else size // word
    return NcclRow(
        size,
        count,
        dtype,
        _REDOP.get(op, "none"),
        root if op in _ROOTED else -1,
        time_s * 1e6,
        algbw,
        algbw * busbw_factor(op, ranks),
        result.algorithm,
        result.bottleneck_link,
        result.closed_form_s * 1e6,
    )


def rows_for(
    topology: Topology,
    op: str,
    sizes: Sequence[int],
    *,
    datatype: str = "float",
    algorithm: str | None = None,
    mode: str = "aggregate",
    root: int = 0,
    calibration: Any = None,
    progress: Any = None,
) -> list[NcclRow]:
    """Simulate ``op`` at every size (rounded to whole elements, per rank where nccl-tests does).

    ``progress`` (a tqdm bar or None) is advanced by one per size.
    """
    if op not in OPS:
        raise TrainsimError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")
    if datatype not in DATATYPES:
        raise TrainsimError(f"unknown datatype {datatype!r}; allowed: {', '.join(DATATYPES)}")
    if algorithm is not None and algorithm not in ALGORITHMS[op]:
        raise TrainsimError(
            f"algorithm {algorithm!r} does not implement {op}; allowed: {', '.join(ALGORITHMS[op])}"
        )
    word, ranks = DATATYPES[datatype], topology.world_size
    rows = []
    for requested in sizes:
        elements = requested // word
        size = (elements // ranks) * ranks * word if op in _PER_RANK_COUNT else elements * word
        result = collective_time(
            topology,
            op,
            size,
            algorithm=algorithm,
            calibration=calibration,
            mode=mode,
            root=root if op in _ROOTED else None,
        )
        rows.append(_row(op, size, word, datatype, ranks, root, result))
        if progress is not None:
            progress.update(1)
    return rows


def _time_str(time_us: float) -> str:
    if time_us >= 10000.0:
        return f"{time_us:7.0f}"
    if time_us >= 100.0:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


def _device_lines(topology: Topology) -> list[str]:
    lines = []
    for rank, device in enumerate(topology.ranks):
        attrs = topology.node(device)
        local = device.split("/", 1)[-1]
        index = int("".join(ch for ch in local if ch.isdigit()) or 0)
        host = f"h{attrs.get('host', 0)}"
        name = attrs.get("gpu") or attrs.get("kind", "")
        lines.append(
            f"#  Rank {rank:2d} Group {0:2d} Pid {0:6d} on {host:>10s} device {index:2d} [0x{0:02x}] {name}"
        )
    return lines


def format_table(
    topology: Topology,
    op: str,
    rows: Sequence[NcclRow],
    sizes: Sequence[int],
    factor: int,
    step_bytes: int,
    mode: str,
) -> str:
    """The nccl-tests stdout layout for ``rows`` (header, one line per size, footer)."""
    step = f"{factor}(factor)" if factor > 1 else f"{step_bytes}(bytes)"
    out = [
        f"# nThread 1 nGpus {topology.world_size} minBytes {sizes[0]} maxBytes {sizes[-1]} step: {step} "
        "warmup iters: 0 iters: 1 agg iters: 1 validation: 0 graph: 0",
        f"# trainsim simulation: op {op}, topology {topology.name}, {topology.world_size} ranks on "
        f"{len(topology.hosts)} node(s), mode {mode}; times are simulated, not measured",
        "#",
        "# Using devices",
        *_device_lines(topology),
        "#",
    ]
    e = ""
    out.append(
        f"# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}           out-of-place                       in-place          "
    )
    out.append(
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" * 2
    )
    out.append(
        f"# {'(B)':>10}  {'(elements)':>12}  {e:>8}  {e:>6}  {e:>6}"
        + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {e:>5}" * 2
    )
    for r in rows:
        result = f"  {_time_str(r.time_us):>7}  {r.algbw_GBps:6.2f}  {r.busbw_GBps:6.2f}  {'N/A':>5}"
        out.append(f"{r.size_bytes:12d}  {r.count:12d}  {r.type:>8}  {r.redop:>6}  {r.root:6d}" + result * 2)
    avg = sum(r.busbw_GBps for r in rows) / len(rows)
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#"]
    out += _algorithm_notes(rows)
    return "\n".join(out) + "\n"


def _algorithm_notes(rows: Sequence[NcclRow]) -> list[str]:
    """``# Algorithm ring for sizes 8..1073741824`` per run of equal algorithm, then the bottleneck."""
    notes = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i].algorithm != rows[start].algorithm:
            notes.append(
                f"# Algorithm {rows[start].algorithm} for sizes {rows[start].size_bytes}..{rows[i - 1].size_bytes}"
            )
            start = i
    notes.append(f"# Bottleneck link at {rows[-1].size_bytes} B: {rows[-1].bottleneck_link}")
    return notes


def format_json(topology: Topology, op: str, datatype: str, mode: str, rows: Sequence[NcclRow]) -> str:
    doc = {
        "format": "trainsim-nccl-sim",
        "version": 1,
        "topology": topology.name,
        "ranks": topology.world_size,
        "op": op,
        "type": datatype,
        "mode": mode,
        "avg_busbw_GBps": sum(r.busbw_GBps for r in rows) / len(rows),
        "results": [
            {
                "size_bytes": r.size_bytes,
                "count": r.count,
                "type": r.type,
                "redop": r.redop,
                "root": r.root,
                "time_us": r.time_us,
                "algbw_GBps": r.algbw_GBps,
                "busbw_GBps": r.busbw_GBps,
                "algorithm": r.algorithm,
                "bottleneck_link": r.bottleneck_link,
                "closed_form_us": r.closed_form_us,
            }
            for r in rows
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def _load_topology(args: argparse.Namespace) -> Topology:
    from topologies import load_cluster

    return load_cluster(args.cluster, gpus=args.gpus, nodes=args.nodes, fabric=args.fabric)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.algo is not None and args.algo not in ALGORITHMS[args.op]:
        raise TrainsimError(
            f"--algo {args.algo!r} does not implement {args.op}; allowed: {', '.join(ALGORITHMS[args.op])}"
        )
    sizes = size_ladder(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    topology = _load_topology(args)
    if args.op in _ROOTED and not 0 <= args.root < topology.world_size:
        raise TrainsimError(f"--root {args.root} is not a rank; allowed 0..{topology.world_size - 1}")
    calibration = None
    if args.calibration is not None:
        calibration = load_profile(args.calibration)
        check_profile_for(calibration, topology)
    if len(sizes) * topology.world_size > NOTE_RANK_SIZES:
        note(
            f"this simulates {len(sizes)} size(s) of {args.op} over {topology.world_size} ranks",
            quiet=args.quiet,
        )
    with bar(len(sizes), "sizes", quiet=args.quiet, unit="size") as progress:
        rows = rows_for(
            topology, args.op, sizes, datatype=args.datatype, algorithm=args.algo, mode=args.mode,
            root=args.root, calibration=calibration, progress=progress,
        )  # fmt: skip
    require_finite([asdict(r) for r in rows], f"the simulated {args.op}")
    if args.format == "json":
        sys.stdout.write(format_json(topology, args.op, args.datatype, args.mode, rows))
    else:
        sys.stdout.write(
            format_table(topology, args.op, rows, sizes, args.stepfactor, args.stepbytes, args.mode)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
