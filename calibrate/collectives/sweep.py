"""The measuring half of ``calibrate.collectives`` (torch): groups, timed iterations, rows and table.

Run by :func:`calibrate.collectives.cli.run_sweep` once the options are known to be good.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from calibrate.collectives.options import DTYPE_NAMES, OPS
from calibrate.common import dist as cdist
from calibrate.common.records import RecordWriter, drop_torn_tail, provenance, resume_keys
from calibrate.nccl_tests.parser import (
    COLLECTIVE_FIELDS,
    collective_row,
    format_table_header,
    format_table_row,
    program_name,
)
from simcore.errors import TrainsimError

__all__ = ["GroupShape", "run_sweep"]

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
_IN_PLACE = ("all_reduce", "broadcast", "reduce")  # torch's forms of these overwrite their buffer
_SPLIT = ("all_gather", "reduce_scatter", "alltoall")  # size = whole buffer, one slice per rank
_RESUME_KEY = ("op", "size_bytes", "group", "repeat")
_COMPUTE_BLOCK = 128  # the --after-compute-ms matmuls: 128 x 128 fp32, ~4 MFLOP each


@dataclass(frozen=True, slots=True)
class GroupShape:
    """A process group measured as one: its name, global ranks, and how they sit on nodes."""

    name: str
    handle: Any
    ranks: tuple[int, ...]
    ranks_per_node: int

    @property
    def size(self) -> int:
        return len(self.ranks)


def _group_shapes(ctx: cdist.DistContext, wanted: Sequence[str]) -> list[GroupShape]:
    """The groups to measure, without duplicates (intra = world on one node, inter = world at one rank/node)."""
    world = tuple(range(ctx.world_size))
    shapes = [GroupShape("world", dist.group.WORLD, world, ctx.local_world_size)] if "world" in wanted else []
    if ctx.world_size == 1 or not {"intra", "inter"} & set(wanted):
        return shapes
    groups = cdist.new_subgroups_by_node(ctx)  # collective: every rank creates every group
    if "intra" in wanted and ctx.nodes > 1 and ctx.local_world_size > 1:
        shapes.append(GroupShape("intra", groups.intra, groups.intra_ranks, ctx.local_world_size))
    if "inter" in wanted and ctx.local_world_size > 1 and ctx.nodes > 1:
        shapes.append(GroupShape("inter", groups.inter, groups.inter_ranks, 1))
    return shapes


def _make_op(
    op: str, size_bytes: int, dtype: torch.dtype, shape: GroupShape, device: torch.device
) -> Callable[[], None]:
    """A closure running one ``op`` of ``size_bytes`` (nccl-tests' meaning) on ``shape``'s group."""
    n, g = shape.size, shape.handle
    count = size_bytes // torch.tensor([], dtype=dtype).element_size()
    buf = torch.ones(count, dtype=dtype, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf, group=g)
    if op == "broadcast":
        return lambda: dist.broadcast(buf, src=shape.ranks[0], group=g)
    if op == "reduce":
        return lambda: dist.reduce(buf, dst=shape.ranks[0], group=g)
    part = torch.ones(count // n, dtype=dtype, device=device)
    if op == "all_gather":
        return lambda: cdist.all_gather_into_tensor(buf, part, group=g)
    if op == "reduce_scatter":
        return lambda: cdist.reduce_scatter_tensor(part, buf, group=g)
    if op == "alltoall":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf, group=g)
    if op == "send_recv":  # nccl-tests' sendrecv: each rank sends to the next and receives from the previous
        me = shape.ranks.index(dist.get_rank())
        recv = torch.empty_like(buf)
        peers = (shape.ranks[(me + 1) % n], shape.ranks[(me - 1) % n])
        return lambda: _ring_exchange(buf, recv, peers, g)
    raise TrainsimError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")


def _ring_exchange(send: torch.Tensor, recv: torch.Tensor, peers: tuple[int, int], group: Any) -> None:
    ops = [dist.P2POp(dist.isend, send, peers[0], group), dist.P2POp(dist.irecv, recv, peers[1], group)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _compute_for(seconds: float, a: torch.Tensor) -> None:
    """Keep this rank's thread computing (small matmuls, as a layer would) for ``seconds``."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        torch.mm(a, a)


def _iteration_times_s(
    run: Callable[[], None], iters: int, device: torch.device, after_compute_s: float = 0.0
) -> torch.Tensor:
    """Per-iteration seconds on this rank; on GPU from CUDA events on back-to-back launches; on CPU
    each after ``after_compute_s`` of compute when that is positive (the compute is not timed)."""
    if device.type == "cuda":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)
        ]
        for start, end in events:
            start.record()
            run()
            end.record()
        torch.cuda.synchronize()
        return torch.tensor([s.elapsed_time(e) * 1e-3 for s, e in events], dtype=torch.float64, device=device)
    times = []
    block = torch.ones(_COMPUTE_BLOCK, _COMPUTE_BLOCK)
    for _ in range(iters):
        if after_compute_s > 0:
            _compute_for(after_compute_s, block)
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return torch.tensor(times, dtype=torch.float64, device=device)


def _measure(
    run: Callable[[], None], iters: int, shape: GroupShape, device: torch.device, after_compute_s: float = 0.0
) -> dict[str, float]:
    """One repeat: timed iterations, each reduced to the slowest rank's time over the world."""
    dist.barrier(group=shape.handle)
    times = _iteration_times_s(run, iters, device, after_compute_s)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # all ranks run this, whichever group they timed
    us = times.cpu() * 1e6
    return {"time_us_mean": float(us.mean()), "time_us_p50": float(us.median()),
            "time_us_min": float(us.min()), "time_us_max": float(us.max())}  # fmt: skip


def _effective_size(op: str, size: int, ranks: int, elem: int) -> int:
    unit = elem * ranks if op in _SPLIT else elem
    return size // unit * unit


class _Output:
    """Rank 0's sinks: JSONL (always), CSV (optional), the printed table."""

    def __init__(self, out_dir: Path, csv: bool) -> None:
        for name in ("collectives.jsonl", "collectives.csv"):
            drop_torn_tail(out_dir / name)  # a killed run's half-written row: measure it again
        self.jsonl = RecordWriter(out_dir / "collectives.jsonl")
        self.csv = RecordWriter(out_dir / "collectives.csv", fieldnames=COLLECTIVE_FIELDS) if csv else None

    def write(self, row: dict[str, Any]) -> None:
        self.jsonl.write(row)
        if self.csv is not None and row.get("kind") == "collective":
            self.csv.write(row)

    def close(self) -> None:
        self.jsonl.close()
        if self.csv is not None:
            self.csv.close()


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _device_lines(shape: GroupShape, hosts: Sequence[str], pids: Sequence[int], device: torch.device) -> str:
    name = _device_name(device)
    return "\n".join(
        f"#  Rank {i:2d} Group  0 Pid {pids[r]:6d} on {hosts[r]:>10} device {r % shape.ranks_per_node:2d} [{device.type}] {name}"
        for i, r in enumerate(shape.ranks)
    )


def _sweep_op(ctx: cdist.DistContext, args: argparse.Namespace, op: str, shape: GroupShape,
              done: set[tuple[Any, ...]], out: _Output | None, who: tuple[list[str], list[int]]) -> None:  # fmt: skip
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes = sorted({_effective_size(op, s, shape.size, elem) for s in args.sizes} - {0})
    if out is not None:
        title = (f"{op} over {shape.name}: {shape.size} ranks, {shape.ranks_per_node} per node, "
                 f"{ctx.backend}, {args.dtype}")  # fmt: skip
        print(f"# Collective test starting: {program_name(op)} (trainsim calibrate.collectives)")
        print(_device_lines(shape, *who, ctx.device))
        print(format_table_header(title, in_place=op in _IN_PLACE), flush=True)
    busbw = []
    for size in sizes:
        todo = [r for r in range(args.repeats) if (op, size, shape.name, r) not in done]
        if not todo:
            continue
        run = _make_op(op, size, dtype, shape, ctx.device)
        for _ in range(args.warmup):
            run()
        for repeat in todo:
            stats = _measure(run, args.iters, shape, ctx.device, args.after_compute_ms / 1e3)
            row = collective_row(
                op=op, size_bytes=size, ranks=shape.size, ranks_per_node=shape.ranks_per_node, group=shape.name,
                count=size // elem, dtype=args.dtype, backend=ctx.backend, in_place=op in _IN_PLACE,
                iters=args.iters, repeat=repeat, device=_device_name(ctx.device), **stats,
            )  # fmt: skip
            if args.after_compute_ms > 0:
                row["after_compute_ms"] = args.after_compute_ms
            if out is not None:
                out.write(row)
                print(format_table_row(row), flush=True)
                busbw.append(row["busbw_GBps"])
    if out is not None:
        average = sum(busbw) / len(busbw) if busbw else 0.0
        print(f"# Avg bus bandwidth    : {average:g}\n#", flush=True)


def _resume_keys(ctx: cdist.DistContext, path: Path, resume: bool) -> set[tuple[Any, ...]]:
    """Rank 0 reads what is done (and says so); every rank gets the same set, so all skip the same sizes."""
    keys = [resume_keys(path, _RESUME_KEY) if resume and ctx.is_main else set()]
    if ctx.world_size > 1:
        dist.broadcast_object_list(keys, src=0)
    return keys[0]


def run_sweep(args: argparse.Namespace) -> int:
    ctx = cdist.init_distributed(args.backend)
    try:
        if args.after_compute_ms > 0 and ctx.device.type != "cpu":
            raise TrainsimError(f"--after-compute-ms needs CPU ranks (gloo); this run uses {ctx.device.type}")
        threads = cdist.set_threads(args.threads)
        out_dir = Path(args.out)
        done = _resume_keys(ctx, out_dir / "collectives.jsonl", args.resume)
        hosts: list[Any] = [None] * ctx.world_size
        pids: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(hosts, os.uname().nodename)
        dist.all_gather_object(pids, os.getpid())
        shapes = _group_shapes(ctx, args.groups)
        out = _Output(out_dir, args.csv) if ctx.is_main else None
        if out is not None:
            out.write({"kind": "provenance", **provenance({
                "job": "calibrate.collectives", "backend": ctx.backend, "world_size": ctx.world_size,
                "ranks_per_node": ctx.local_world_size, "nodes": ctx.nodes, "hostnames": hosts,
                "threads": threads, "device_kind": "gpu" if ctx.device.type == "cuda" else "cpu",
            })})  # fmt: skip
        for shape in shapes:
            for op in args.ops:
                if op == "send_recv" and shape.size < 2:
                    continue  # no peer to exchange with in a group of one
                _sweep_op(ctx, args, op, shape, done, out, (hosts, pids))
        if out is not None:
            out.close()
        return 0
    finally:
        cdist.shutdown()
