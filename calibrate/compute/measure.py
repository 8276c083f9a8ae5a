"""The measuring half of ``calibrate.compute`` (torch): matmuls, memory copy, layers, overheads, slowdown.

Run by :func:`calibrate.compute.cli.run_compute` once the options are known to be good.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from calibrate.common import dist as cdist
from calibrate.common.records import RecordWriter, provenance, resume_keys
from calibrate.compute.dtypes import DTYPES
from calibrate.compute.layers import LayerStep, layer_benchmarks, layer_steps, op_overhead_benchmarks
from simcore.errors import TrainsimError

__all__ = ["CLOCKS", "run_compute", "time_calls_s"]

_RESUME_KEY = ("item", "repeat")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def time_calls_s(
    call: Callable[[], Any], iters: int, device: torch.device, clock: str = "wall"
) -> list[float]:
    """Seconds of each of ``iters`` calls, the device synchronised around each. ``clock``: ``wall``
    (elapsed) or ``cpu`` (this thread's CPU time, which time taken by other processes sharing the
    cores does not count; for one-thread CPU ranks, whose arithmetic runs in the calling thread)."""
    now = CLOCKS[clock]
    times = []
    for _ in range(iters):
        _sync(device)
        begin = now()
        call()
        _sync(device)
        times.append(now() - begin)
    return times


def _stats(times_s: list[float]) -> dict[str, float]:
    us = [t * 1e6 for t in times_s]
    return {"time_us_mean": statistics.fmean(us), "time_us_p50": statistics.median(us),
            "time_us_min": min(us), "time_us_max": max(us)}  # fmt: skip


def _matmul_items(
    args: argparse.Namespace, device: torch.device
) -> Iterator[tuple[str, dict[str, Any], Callable[[], Any]]]:
    for dtype_name in args.dtypes:
        for size in args.matmul_sizes:
            m = n = k = size
            a = torch.randn(m, k, device=device).to(DTYPES[dtype_name])
            b = torch.randn(k, n, device=device).to(DTYPES[dtype_name])
            info = {"kind": "matmul", "dtype": dtype_name, "shape": f"{m}x{k}x{n}", "flops": 2.0 * m * n * k}
            yield f"matmul/{dtype_name}/{m}x{k}x{n}", info, functools.partial(torch.mm, a, b)


def _memory_item(nbytes: int, device: torch.device) -> tuple[str, dict[str, Any], Callable[[], Any]]:
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    info = {"kind": "memory", "dtype": "fp32", "shape": str(src.numel() * 4), "bytes": 2.0 * src.numel() * 4}
    return f"memory/{src.numel() * 4}", info, lambda: dst.copy_(src)


def _configure_dtype(dtype_name: str, device: torch.device) -> None:
    if device.type == "cuda":  # tf32 is fp32 storage with TF32 tensor-core math
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"


def _measure_item(args: argparse.Namespace, item: str, info: dict[str, Any], call: Callable[[], Any],
                  ctx: cdist.DistContext, write: Callable[[dict[str, Any]], None], done: set[tuple[Any, ...]]) -> None:  # fmt: skip
    todo = [r for r in range(args.repeats) if (item, r) not in done]
    if not todo:
        return
    _configure_dtype(str(info.get("dtype")), ctx.device)
    time_calls_s(call, args.warmup, ctx.device)
    for repeat in todo:
        stats = _stats(time_calls_s(call, args.iters, ctx.device, args.clock))
        row = {**info, "item": item, "repeat": repeat, "iters": args.iters, "clock": args.clock, **stats}
        seconds = stats["time_us_p50"] * 1e-6
        if "flops" in info:
            row["achieved_flops"] = info["flops"] / seconds
        if "bytes" in info:
            row["bandwidth_Bps"] = info["bytes"] / seconds
        write(row)


def _measure_step(args: argparse.Namespace, step: LayerStep, ctx: cdist.DistContext,
                  write: Callable[[dict[str, Any]], None], done: set[tuple[Any, ...]]) -> None:  # fmt: skip
    """``step``'s forward and backward rows per repeat, both from the same ``--iters`` iterations,
    with the median minor page faults of each phase and the malloc tunables it ran under."""
    todo = [r for r in range(args.repeats) if (f"{step.item}/fwd", r) not in done]
    if not todo:
        return
    _configure_dtype(str(step.fwd.get("dtype")), ctx.device)
    clock = _synced(CLOCKS[args.clock], ctx.device)
    for _ in range(args.warmup):
        step.run(clock)
    for repeat in todo:
        times = [step.run(clock) for _ in range(args.iters)]
        for phase, info in enumerate((step.fwd, step.bwd)):
            stats = _stats([t[phase] for t in times])
            seconds = stats["time_us_p50"] * 1e-6
            faults = statistics.median(t[2 + phase] for t in times)
            write({**info, "item": f"{step.item}/{info['phase']}", "repeat": repeat, "iters": args.iters,
                   "clock": args.clock, **stats, "achieved_flops": info["flops"] / seconds,
                   "bandwidth_Bps": info["bytes"] / seconds, "minor_faults_p50": faults,
                   "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")})  # fmt: skip


def _synced(clock: Callable[[], float], device: torch.device) -> Callable[[], float]:
    def now() -> float:
        _sync(device)
        return clock()

    return now


def _slowdown_rows(args: argparse.Namespace, ctx: cdist.DistContext) -> Iterator[dict[str, Any]]:
    """Matmul time while an all_reduce of ``--slowdown-bytes`` runs, against alone, per repeat."""
    size = args.matmul_sizes[-1]
    a = torch.randn(size, size, device=ctx.device)
    comm = torch.ones(args.slowdown_bytes // 4, device=ctx.device)
    time_calls_s(lambda: torch.mm(a, a), args.warmup, ctx.device)
    for repeat in range(args.repeats):
        dist.barrier()
        alone = time_calls_s(lambda: torch.mm(a, a), args.iters, ctx.device)
        dist.barrier()
        overlapped, comm_s = [], []
        for _ in range(args.iters):
            begin = time.perf_counter()
            work = dist.all_reduce(comm, async_op=True)
            overlapped += time_calls_s(lambda: torch.mm(a, a), 1, ctx.device)
            work.wait()
            _sync(ctx.device)
            comm_s.append(time.perf_counter() - begin)
        yield {
            "kind": "slowdown", "item": f"slowdown/{size}", "repeat": repeat, "dtype": "fp32",
            "shape": f"{size}x{size}x{size}", "comm_bytes": comm.numel() * 4, "iters": args.iters,
            "time_alone_us": statistics.median(alone) * 1e6, "time_with_comm_us": statistics.median(overlapped) * 1e6,
            "comm_time_us": statistics.median(comm_s) * 1e6,
            "slowdown": statistics.median(overlapped) / statistics.median(alone),
        }  # fmt: skip


def _dtypes(text: str | None, device: torch.device) -> list[str]:
    default = "fp32,tf32,fp16,bf16" if device.type == "cuda" else "fp32,bf16"
    names = [d.strip() for d in (text or default).split(",") if d.strip()]
    allowed = list(DTYPES) if device.type == "cuda" else ["fp32", "bf16"]
    bad = [d for d in names if d not in allowed]
    if bad or not names:
        raise TrainsimError(
            f"--dtypes: {bad or text!r} not measurable on {device.type}; allowed: {', '.join(allowed)}"
        )
    return names


def run_compute(args: argparse.Namespace) -> int:
    ctx = cdist.init_distributed(args.backend)
    try:
        threads = cdist.set_threads(args.threads)
        if args.clock == "cpu" and (ctx.device.type != "cpu" or threads != 1):
            raise TrainsimError(f"--clock cpu times this thread's CPU time: it needs a CPU rank with --threads 1 "
                                f"(got device {ctx.device.type}, {threads} threads); use --clock wall")  # fmt: skip
        args.dtypes = _dtypes(args.dtypes, ctx.device)
        path = Path(args.out) / "compute.jsonl"
        keys = [resume_keys(path, _RESUME_KEY) if args.resume and ctx.is_main else set()]
        if ctx.world_size > 1:
            dist.broadcast_object_list(keys, src=0)
        writer = RecordWriter(path) if ctx.is_main else None  # drops a killed run's half-written row
        common = {
            "threads": threads,
            "device": str(ctx.device),
            "world_size": ctx.world_size,
            "rank": ctx.rank,
        }

        def write(row: dict[str, Any]) -> None:
            if writer is not None:
                writer.write({**row, **common})
                figure = f"x{row['slowdown']:.3f}" if "slowdown" in row else f"{row['time_us_p50']:10.1f} us"
                print(f"{row['item']:<40} repeat {row['repeat']}  {figure}", flush=True)

        if writer is not None:
            writer.write({"kind": "provenance", **provenance({"job": "calibrate.compute", **common,
                                                               "backend": ctx.backend, "dtypes": args.dtypes})})  # fmt: skip
        items = [*_matmul_items(args, ctx.device), _memory_item(args.mem_bytes, ctx.device),
                 *layer_benchmarks(args.layers, args.dtypes, ctx.device, args.layer_scale),
                 *op_overhead_benchmarks(args.op_chains, ctx.device)]  # fmt: skip
        for item, info, call in items:
            _measure_item(args, item, info, call, ctx, write, keys[0])
        for step in layer_steps(args.step_layers, args.dtypes, ctx.device, args.layer_scale):
            _measure_step(args, step, ctx, write, keys[0])
        if ctx.world_size > 1:
            for row in _slowdown_rows(args, ctx):
                if (row["item"], row["repeat"]) not in keys[0]:
                    write(row)
        if writer is not None:
            writer.close()
        return 0
    finally:
        cdist.shutdown()
