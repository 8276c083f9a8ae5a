"""Simulated nccl-tests: the ``*_perf`` table for a collective on a simulated cluster.

    python -m experiments.nccl_sim --topology dgx-a100 --gpus 8 --op all_reduce -b 8 -e 1G -f 2

prints what ``all_reduce_perf -b 8 -e 1G -f 2 -g 8`` prints - header comments, then per size
``size(B) count type redop root`` and out-of-place / in-place ``time(us) algbw(GB/s)
busbw(GB/s) #wrong`` (in-place repeats the simulated numbers; ``#wrong`` is ``N/A`` since no data is
checked), then the ``# Avg bus bandwidth`` footer - so a simulated table can be diffed against a
measured one. busbw = algbw x factor, as nccl-tests: all_reduce 2(n-1)/n; reduce_scatter,
all_gather and all_to_all(v) (n-1)/n; broadcast, reduce and send_recv 1. Sizes take nccl-tests'
suffixes (``8``, ``1K``, ``1M``, ``1G`` = powers of 1024); for all_gather / reduce_scatter the size
is the whole buffer and ``count`` is per rank, as nccl-tests prints them; for all_to_all(v) the size
is each rank's send buffer. Trailing ``#`` lines name the simulated algorithm and protocol per size
range and the bottleneck link of the largest size.

Algorithm and protocol are chosen as NCCL chooses them; ``--algo`` / ``--proto`` pin them, and the
environment variables NCCL reads restrict them the same way: ``NCCL_ALGO`` and ``NCCL_PROTO``
(lists, or ``^list`` to exclude), ``NCCL_COLLNET_ENABLE=1`` (CollNet/SHARP where the fabric reduces;
off otherwise) and ``NCCL_NVLS_ENABLE=0``. ``all_to_allv`` sends rank i's buffer to rank j in
proportion to ``1 + skew * j / (n - 1)`` (``--skew``, default 1: the last rank receives twice
what the first does).

``--format json`` prints one document::

    {"format": "trainsim-nccl-sim", "version": 1, "topology": str, "ranks": int, "op": str,
     "type": str, "mode": "aggregate" | "per-step", "avg_busbw_GBps": float,
     "results": [{"size_bytes": int, "count": int, "type": str, "redop": str, "root": int,
                  "time_us": float, "algbw_GBps": float, "busbw_GBps": float,
                  "algorithm": str, "protocol": str, "bottleneck_link": str,
                  "bottleneck": {"src": str, "dst": str, "kind": str, "bandwidth_GBps": float,
                                 "usable_GBps": float} | null, "closed_form_us": float}, ...],
     "network": {"nic_bandwidth_Gbps": float | null, "nics_per_node": int | null,
                 "oversubscription": float | null}}   # only with a network what-if flag

Network what-ifs on any cluster, no YAML edit: ``--nic-bandwidth RATE`` (every NIC's port speed),
``--nics-per-node N`` and ``--oversubscription R`` (:mod:`topologies.network`); the header's
``# trainsim simulation`` line and the JSON's ``network`` record say which were given.

``--out DIR`` (new or empty; ``--force`` writes into it) also writes ``nccl_sim.json`` (that
document plus ``alternatives``: the sizes with each algorithm/protocol the topology allows pinned,
``notes``, and ``measured``: the out-of-place rows of ``--compare LOG``, a real nccl-tests log) and
``report.html`` drawn from it (:mod:`experiments.nccl_sim.outputs`).

GB/s are 1e9 bytes/s. ``--cluster`` and ``--topology`` name the same flag. Bad input prints one
``error:`` line and exits with status 2; so does a ladder of more than :data:`MAX_SIZES` sizes, a
size over 1 PiB or more than 32,768 GPUs. A run over many ranks says what it simulates and shows
a progress bar per size on stderr (a terminal only; ``--quiet`` turns both off).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from experiments.common.finite import require_finite
from experiments.common.progress import bar, note
from experiments.nccl_sim.args import DATATYPES, build_parser
from experiments.nccl_sim.outputs import alternatives, measured_rows, write_outputs
from experiments.report_html.page import command_line
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile
from simcore.cliargs import (
    output_dir,
)
from simcore.collectives import (
    ALGORITHMS,
    OPS,
    PROTOCOLS,
    CollectiveResult,
    LinkRef,
    NcclOptions,
    busbw_factor,
    collective_time,
    describe_link,
)
from simcore.collectives.options import algorithm_name
from simcore.errors import TrainsimError, cli_entry
from simcore.topology import Topology
from topologies import load_cluster
from topologies.cliargs import (
    network_from_args,
)
from topologies.network import NetworkOverrides

__all__ = ["NcclRow", "check_algo", "check_proto", "main", "rows_for", "size_ladder", "skewed_splits"]

_REDOP = {"all_reduce": "sum", "reduce": "sum", "reduce_scatter": "sum", "ps_push": "sum"}
_ROOTED = ("broadcast", "reduce")
_PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all", "all_to_allv")
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
    protocol: str
    bottleneck: LinkRef | None
    closed_form_us: float


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
        result.protocol,
        result.bottleneck,
        result.closed_form_s * 1e6,
    )


def rows_for(
    topology: Topology,
    op: str,
    sizes: Sequence[int],
    *,
    datatype: str = "float",
    algorithm: str | None = None,
    protocol: str | None = None,
    mode: str = "aggregate",
    root: int = 0,
    calibration: Any = None,
    progress: Any = None,
    options: NcclOptions | None = None,
    skew: float = 1.0,
) -> list[NcclRow]:
    """Simulate ``op`` at every size (rounded to whole elements, per rank where nccl-tests does).

    ``progress`` (a tqdm bar or None) is advanced by one per size.
    """
    if op not in OPS:
        raise TrainsimError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")
    if datatype not in DATATYPES:
        raise TrainsimError(f"unknown datatype {datatype!r}; allowed: {', '.join(DATATYPES)}")
    algorithm = check_algo(op, algorithm)
    word, ranks = DATATYPES[datatype], topology.world_size
    splits = skewed_splits(ranks, skew) if op == "all_to_allv" else None
    rows = []
    for requested in sizes:
        elements = requested // word
        size = (elements // ranks) * ranks * word if op in _PER_RANK_COUNT else elements * word
        result = collective_time(
            topology,
            op,
            size,
            algorithm=algorithm,
            protocol=protocol,
            calibration=calibration,
            mode=mode,
            root=root if op in _ROOTED else None,
            splits=splits,
            options=options,
        )
        rows.append(_row(op, size, word, datatype, ranks, root, result))
        if progress is not None:
            progress.update(1)
    return rows


def check_algo(op: str, algo: str | None, what: str = "algorithm") -> str | None:
    """trainsim's name for ``algo`` (NCCL spellings accepted); TrainsimError unless it implements ``op``."""
    if algo is None:
        return None
    name = algo if algo in ALGORITHMS[op] else algorithm_name(algo)
    if name is None or name not in ALGORITHMS[op]:
        raise TrainsimError(f"{what} {algo!r} does not implement {op}; allowed: {', '.join(ALGORITHMS[op])}")
    return name


def check_proto(proto: str | None) -> str | None:
    if proto is None:
        return None
    for name in PROTOCOLS:
        if proto.strip().lower() == name.lower():
            return name
    raise TrainsimError(f"--proto {proto!r} is not a protocol; allowed: {', '.join(PROTOCOLS)}")


def skewed_splits(ranks: int, skew: float) -> list[list[float]]:
    """all_to_allv's send matrix: rank i sends to j in proportion to 1 + skew * j / (ranks - 1)."""
    weight = [1.0 + skew * j / max(1, ranks - 1) for j in range(ranks)]
    return [[0.0 if i == j else weight[j] for j in range(ranks)] for i in range(ranks)]


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
    network: NetworkOverrides | None = None,
) -> str:
    """The nccl-tests stdout layout for ``rows`` (header, one line per size, footer)."""
    step = f"{factor}(factor)" if factor > 1 else f"{step_bytes}(bytes)"
    what_if = f", network {network.describe()}" if network is not None and network.given else ""
    out = [
        f"# nThread 1 nGpus {topology.world_size} minBytes {sizes[0]} maxBytes {sizes[-1]} step: {step} "
        "warmup iters: 0 iters: 1 agg iters: 1 validation: 0 graph: 0",
        f"# trainsim simulation: op {op}, topology {topology.name}, {topology.world_size} ranks on "
        f"{len(topology.hosts)} node(s), mode {mode}{what_if}; times are simulated, not measured",
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
    """``# Algorithm ring/LL for sizes 8..65536`` per run of equal choice, then the bottleneck."""
    notes = []
    start = 0
    for i in range(1, len(rows) + 1):
        choice = (rows[start].algorithm, rows[start].protocol)
        if i == len(rows) or (rows[i].algorithm, rows[i].protocol) != choice:
            name = "/".join(c for c in choice if c)
            notes.append(f"# Algorithm {name} for sizes {rows[start].size_bytes}..{rows[i - 1].size_bytes}")
            start = i
    notes.append(f"# Bottleneck link at {rows[-1].size_bytes} B: {describe_link(rows[-1].bottleneck)}")
    return notes


def _link_json(link: LinkRef | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {"src": link.src, "dst": link.dst, "kind": link.kind,
            "bandwidth_GBps": link.bandwidth_Bps / 1e9, "usable_GBps": link.usable_Bps / 1e9}  # fmt: skip


def format_json(
    topology: Topology,
    op: str,
    datatype: str,
    mode: str,
    rows: Sequence[NcclRow],
    network: NetworkOverrides | None = None,
) -> str:
    return json.dumps(nccl_document(topology, op, datatype, mode, rows, network), indent=2) + "\n"


def _result_records(rows: Sequence[NcclRow]) -> list[dict[str, Any]]:
    return [
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
            "protocol": r.protocol,
            "bottleneck_link": describe_link(r.bottleneck),
            "bottleneck": _link_json(r.bottleneck),
            "closed_form_us": r.closed_form_us,
        }
        for r in rows
    ]


def nccl_document(
    topology: Topology,
    op: str,
    datatype: str,
    mode: str,
    rows: Sequence[NcclRow],
    network: NetworkOverrides | None = None,
) -> dict[str, Any]:
    """The ``--format json`` document (see the module docstring)."""
    doc: dict[str, Any] = {
        "format": "trainsim-nccl-sim",
        "version": 1,
        "topology": topology.name,
        "ranks": topology.world_size,
        "op": op,
        "type": datatype,
        "mode": mode,
        "avg_busbw_GBps": sum(r.busbw_GBps for r in rows) / len(rows),
        "results": _result_records(rows),
    }
    if network is not None and network.given:
        doc["network"] = network.record()
    return doc


def _load_topology(args: argparse.Namespace, network: NetworkOverrides) -> Topology:
    return load_cluster(args.cluster, gpus=args.gpus, nodes=args.nodes, fabric=args.fabric, network=network)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    algorithm = check_algo(args.op, args.algo, "--algo")
    protocol = check_proto(args.proto)
    if not args.skew >= 0 or args.skew == float("inf"):
        raise TrainsimError(f"--skew must be a finite number >= 0, got {args.skew}")
    options = NcclOptions.from_env(os.environ)
    out = output_dir(args.out, force=args.force)
    if args.compare is not None and out is None:
        raise TrainsimError("--compare LOG draws the log on the report page: give --out DIR too")
    measured = measured_rows(args.compare, args.op) if args.compare is not None else None
    sizes = size_ladder(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    network = network_from_args(args)
    topology = _load_topology(args, network)
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
            topology, args.op, sizes, datatype=args.datatype, algorithm=algorithm, protocol=protocol,
            mode=args.mode,
            root=args.root, calibration=calibration, options=options, skew=args.skew, progress=progress,
        )  # fmt: skip
    require_finite([asdict(r) for r in rows], f"the simulated {args.op}")
    if args.format == "json":
        sys.stdout.write(format_json(topology, args.op, args.datatype, args.mode, rows, network))
    else:
        sys.stdout.write(
            format_table(topology, args.op, rows, sizes, args.stepfactor, args.stepbytes, args.mode, network)
        )
    if out is not None:
        document = nccl_document(topology, args.op, args.datatype, args.mode, rows, network)
        simulate = lambda algo, proto: _result_records(rows_for(  # noqa: E731 - one call, its options fixed
            topology, args.op, sizes, datatype=args.datatype, algorithm=algo, protocol=proto, mode=args.mode,
            root=args.root, calibration=calibration, options=options, skew=args.skew))  # fmt: skip
        pinned = [algorithm] if algorithm else list(ALGORITHMS[args.op])
        document["alternatives"], document["notes"] = alternatives(
            pinned, [protocol] if protocol else list(PROTOCOLS), simulate, len(sizes) * topology.world_size
        )
        document["measured"] = measured
        command = command_line("python -m experiments.nccl_sim", sys.argv[1:] if argv is None else argv)
        for path in write_outputs(out, document, command):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
