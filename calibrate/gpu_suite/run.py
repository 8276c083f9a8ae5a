"""The measuring half of ``calibrate.gpu_suite`` (torch): kernels, a sustained GEMM loop, training steps.

Run by :func:`calibrate.gpu_suite.cli.main` once the options are known to be good. Every record is
appended and flushed as it is taken (:class:`calibrate.common.records.RecordWriter`), so a run cut
short keeps everything measured before; an item that fails (an FP8 GEMM the driver refuses, a
compile error) is recorded with its error and the run goes on; items past the time budget are
recorded as skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from calibrate.common.records import RecordWriter, provenance
from calibrate.compute.measure import time_calls_s
from calibrate.gpu_suite.kernels import kernel_calls, supports_fp8
from calibrate.gpu_suite.monitor import Monitor, open_monitor
from calibrate.gpu_suite.plan import (
    RECORDS,
    SIZES,
    KernelItem,
    SizePlan,
    StepItem,
    device_spec_for,
    kernel_items,
    step_items,
)
from calibrate.gpu_suite.steps import measure_step

__all__ = ["measure_kernel", "run_suite"]

Write = Callable[[dict[str, Any]], None]


def _median_s(call: Callable[[], Any], size: SizePlan, device: torch.device) -> float:
    time_calls_s(call, size.warmup, device)
    return statistics.median(
        statistics.median(time_calls_s(call, size.iters, device)) for _ in range(size.repeats)
    )


def measure_kernel(item: KernelItem, size: SizePlan, device: torch.device) -> list[dict[str, Any]]:
    """The forward's median seconds and, for a kernel with a backward, the backward's: (forward +
    backward) minus the forward alone, both timed from one function. One row per phase."""
    calls = kernel_calls(item, device, size.compile_backend)
    forward = _median_s(calls[0], size, device)
    rows = [{**dataclasses.asdict(item), "key": item.key, "time_s": forward}]
    if len(calls) > 1:
        both = _median_s(calls[1], size, device)
        backward = dataclasses.replace(item, phase="bwd")
        rows.append(
            {
                **dataclasses.asdict(backward),
                "key": backward.key,
                "time_s": both - forward,
                "fwd_and_bwd_s": both,
            }
        )
    return rows


def _guarded(
    key: str, base: dict[str, Any], measure: Callable[[], list[dict[str, Any]]], write: Write
) -> None:
    """Write ``measure()``'s rows, or one row with its error: one failed item never stops the run."""
    try:
        rows = measure()
    except Exception as exc:
        write(
            {**base, "key": key, "error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"}
        )
        return
    for row in rows:
        write(row)


def _sustained(size: SizePlan, device: torch.device, monitor: Monitor, write: Write) -> None:
    """Back-to-back square GEMMs for ``size.sustained_s`` seconds, a sample every interval."""
    n = 8192 if device.type == "cuda" else 256
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty_like(a)
    flops, interval = 2.0 * n**3, min(1.0, size.sustained_s / 4)
    start = time.monotonic()
    while time.monotonic() - start < size.sustained_s:
        begin, calls = time.monotonic(), 0
        while time.monotonic() - begin < interval:
            torch.mm(a, b, out=c)
            calls += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.monotonic() - begin
        write({
            "kind": "sustained", "key": f"sustained/gemm/{n}/bf16", "n": n, "t_s": time.monotonic() - start,
            "calls": calls, "tflops": calls * flops / elapsed / 1e12, **monitor.sample(),
        })  # fmt: skip


def _step_rows(
    step: StepItem, base: dict[str, Any], size: SizePlan, device: torch.device
) -> list[dict[str, Any]]:
    return [{**base, "key": step.key, **measure_step(step, device, size.step_iters, size.compile_backend)}]


def _kernels(
    size: SizePlan, device: torch.device, kinds: tuple[str, ...], variant: str, deadline: float, write: Write
) -> None:
    """Every kernel item of ``kinds`` in ``variant``; a backward is measured with its forward (one
    function, one compile)."""
    for item in kernel_items(size, fp8=supports_fp8(device), kinds=kinds):
        if item.phase == "bwd" or item.variant != variant:
            continue
        base = dataclasses.asdict(item)
        if not _over(deadline, item.key, base, write):
            _guarded(item.key, base, functools.partial(measure_kernel, item, size, device), write)


def _device(device: torch.device) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    info: dict[str, Any] = {"device_name": name, "device_spec": device_spec_for(name)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {"capability": list(torch.cuda.get_device_capability(device)), "sms": props.multi_processor_count,
                 "memory_bytes": props.total_memory, "fp8": supports_fp8(device)}  # fmt: skip
    return info


def _over(deadline: float, key: str, base: dict[str, Any], write: Write) -> bool:
    if time.monotonic() <= deadline:
        return False
    write({**base, "key": key, "skipped": "the run's time budget (--budget-s) was spent"})
    return True


def run_suite(args: argparse.Namespace) -> Path:
    """Measure everything into ``<out>/suite.jsonl``; returns its path."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size_name = "tiny" if args.tiny or device.type == "cpu" else "full"
    size = SIZES[size_name]
    path = Path(args.out) / RECORDS
    monitor = open_monitor(device.type)
    deadline = time.monotonic() + args.budget_s
    with RecordWriter(path) as writer:
        extra = {"job": "calibrate.gpu_suite", "size": size_name, "monitor": monitor.source,
                 "clocks_at_start": monitor.sample(), "compile_backend": size.compile_backend,
                 "command": " ".join(["python -m calibrate.gpu_suite", *sys.argv[1:]]), **_device(device)}  # fmt: skip
        writer.write({"kind": "provenance", **provenance(extra)})

        def write(row: dict[str, Any]) -> None:
            writer.write(row)
            print(f"{row['key']:<72} {_figure(row)}", flush=True)

        # eager first, compiled last: compilation takes most of the time, so a run cut by the budget
        # loses the compiled variants, not the kernels and steps the model is priced on
        kinds = tuple(args.kinds)
        _kernels(size, device, kinds, "eager", deadline, write)
        if "sustained" in kinds and not _over(deadline, "sustained", {"kind": "sustained"}, write):
            _sustained(size, device, monitor, write)
        _steps(size, device, kinds, "eager", deadline, write)
        _kernels(size, device, kinds, "compiled", deadline, write)
        _steps(size, device, kinds, "compiled", deadline, write)
    return path


def _steps(
    size: SizePlan, device: torch.device, kinds: tuple[str, ...], variant: str, deadline: float, write: Write
) -> None:
    for step in step_items(size) if "step" in kinds else ():
        base = {"kind": "step", **dataclasses.asdict(step)}
        if step.variant == variant and not _over(deadline, step.key, base, write):
            _guarded(step.key, base, functools.partial(_step_rows, step, base, size, device), write)


def _figure(row: dict[str, Any]) -> str:
    if "error" in row or "skipped" in row:
        return str(row.get("error") or row.get("skipped"))[:60]
    if row.get("kind") == "sustained":
        return f"{row['tflops']:8.3g} TFLOPS  SM {row.get('sm_clock_mhz')} MHz  {row.get('power_w')} W"
    if "step_time_s" in row:
        return f"{row['step_time_s'] * 1e3:10.2f} ms/step"
    return f"{row['time_s'] * 1e6:10.1f} us"
