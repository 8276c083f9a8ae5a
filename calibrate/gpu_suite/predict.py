"""The simulator's prediction for every measurement of the suite, and the predicted-vs-measured table.

No torch: the table is built from the records alone (``python -m calibrate.gpu_suite --table DIR``
rebuilds it for records taken earlier, against the simulator as it is now). Kernel items are
priced by :meth:`simcore.compute.roofline.ComputeModel.layer_time_s` on the very layer they ran
(preset, layer, batch, sequence of the record); the sustained loop by the same model for its square
GEMM; training steps by :func:`simcore.strategies.runner.simulate_step` of the model's preset (or
of the plain-torch module itself, traced, for the tiny models) on one device, bf16 with fp32 master
weights and AdamW, peak memory as the allocator holds it (compared with torch's peak reserved).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies import get_strategy
from simcore.strategies.base import DTYPE_BYTES, TrainingConfig
from simcore.strategies.runner import make_context, simulate_step
from simcore.topology import Topology
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer, Workload
from topologies.builders import build_cluster
from topologies.spec import ClusterSpec, DeviceDecl, FabricSpec, NodeType

__all__ = ["Comparison", "compare", "format_table", "single_device_cluster"]

COMPILED_NOTE = "priced as eager: this build has no compiled-kernel pricing"
# whether this build prices torch.compile'd kernels and steps (ComputeModel(compiled=...),
# TrainingConfig.compile); without it the compiled items are priced as eager, and say so
COMPILED_KERNELS = "compiled" in inspect.signature(ComputeModel).parameters
COMPILED_STEPS = "compile" in {f.name for f in dataclasses.fields(TrainingConfig)}


def single_device_cluster(device: str) -> Topology:
    """One rank on one ``device``, nothing else: a one-device step needs no links or fabric."""
    node = NodeType("single-gpu", (DeviceDecl("gpu0", "gpu", spec=device),), (), ("gpu0",), "one device")
    fabric = FabricSpec(type="none", source="one device: no fabric")
    spec = ClusterSpec(
        f"single-{device}", MappingProxyType({"single-gpu": node}), (("single-gpu", 1),), fabric
    )
    return build_cluster(spec)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One measured quantity beside the simulator's value for it."""

    key: str
    quantity: str  # time_s | tflops | step_time_s | peak_memory_bytes
    measured: float | None
    predicted: float | None
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        """(predicted - measured) / measured, in percent."""
        if self.measured is None or self.predicted is None or self.measured <= 0:
            return None
        return 100.0 * (self.predicted - self.measured) / self.measured


class _Workloads:
    """The workloads a table needs, loaded once per (spec, sequence, image size) while it is built."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, int], Workload] = {}

    def get(self, spec: str, seq_len: int = 0, image_size: int = 0) -> Workload:
        key = (spec, seq_len, image_size)
        if key not in self._held:
            self._held[key] = load_workload(
                spec, seq_len=seq_len or None, image_size=image_size or None, dtype="bf16"
            )
        return self._held[key]


def _layer(workload: Workload, name: str) -> Layer:
    found = next((layer for layer in workload.layers if layer.name == name), None)
    if found is None:
        raise TrainsimError(f"{workload.name} has no layer {name!r}")
    return found


def _kernel(record: Mapping[str, Any], device: str, loads: _Workloads) -> Comparison:
    workload = loads.get(record["preset"], int(record["seq_len"]))
    compiled = record.get("variant") == "compiled"
    extra: dict[str, Any] = {"compiled": True} if compiled and COMPILED_KERNELS else {}
    model = ComputeModel(device_spec(device), str(record["dtype"]), **extra)
    seconds = model.layer_time_s(_layer(workload, record["layer"]), int(record["batch"]), record["phase"])
    note = COMPILED_NOTE if compiled and not extra else ""
    return Comparison(record["key"], "time_s", record.get("time_s"), seconds, note)


def _sustained(records: Sequence[Mapping[str, Any]], device: str) -> list[Comparison]:
    if not records:
        return []
    n = int(records[0]["n"])
    flops, word = 2.0 * n**3, DTYPE_BYTES["bf16"]
    gemm = Layer(
        "matmul", "linear", -1, n * n, flops, 2 * flops, 0.0, n * n * word, 2.0 * n * n * word, (n, n, n)
    )
    rate = flops / ComputeModel(device_spec(device), "bf16").layer_time_s(gemm, 1, "fwd") / 1e12
    rates = [float(r["tflops"]) for r in records]
    late = rates[len(rates) // 2 :]  # the second half: clocks settled under the sustained load
    clocks = [r.get("sm_clock_mhz") for r in records if r.get("sm_clock_mhz")]
    note = (
        f"first {rates[0]:.1f}, settled median of the second half; SM clock {clocks[0]} -> {clocks[-1]} MHz"
        if clocks
        else ""
    )
    return [Comparison(str(records[0]["key"]), "tflops", statistics.median(late), rate, note)]


def _step(record: Mapping[str, Any], device: str, loads: _Workloads) -> list[Comparison]:
    seq, image = int(record.get("seq_len") or 0), int(record.get("image_size") or 0)
    workload = loads.get(record["workload"], seq, image)
    batch = int(record["batch"])
    compiled = record.get("variant") == "compiled"
    extra: dict[str, Any] = {"compile": True} if compiled and COMPILED_STEPS else {}
    config = TrainingConfig(
        global_batch=batch, micro_batch=batch, seq_len=seq or None, dtype="bf16", optimizer="adamw",
        gradient_as_bucket_view=True, **extra,
    )  # fmt: skip
    ctx = make_context(workload, config, single_device_cluster(device))
    step = simulate_step(get_strategy("ddp"), ctx, seed=0, slowdown=config.slowdown(None))
    note = COMPILED_NOTE if compiled and not extra else ""
    peak = step.run.memory.peak()
    tensors = peak.peak_bytes - peak.breakdown.get("overhead", 0.0)  # without the allocator's fragmentation
    return [
        Comparison(record["key"], "step_time_s", record.get("step_time_s"), step.step_times_s[0], note),
        Comparison(record["key"], "peak_memory_bytes", record.get("peak_reserved_bytes"), peak.peak_bytes,
                   "allocator view vs torch peak reserved"),
        Comparison(record["key"], "peak_memory_bytes", record.get("peak_allocated_bytes"), tensors,
                   "tensors vs torch peak allocated"),
    ]  # fmt: skip


def compare(records: Sequence[Mapping[str, Any]]) -> list[Comparison]:
    """A comparison per measured quantity of ``records`` (failed and skipped items left out)."""
    prov = next((r for r in records if r.get("kind") == "provenance"), {})
    device = prov.get("device_spec")
    measured = [
        r for r in records if r.get("kind") != "provenance" and "error" not in r and "skipped" not in r
    ]
    if not device:
        return [Comparison(r["key"], "time_s", r.get("time_s"), None, f"no device spec for {prov.get('device_name')!r}")
                for r in measured if "time_s" in r]  # fmt: skip
    loads, out = _Workloads(), []
    for record in measured:
        try:
            if record["kind"] in ("gemm", "attention", "memory"):
                out.append(_kernel(record, device, loads))
            elif record["kind"] == "step":
                out += _step(record, device, loads)
        except TrainsimError as exc:
            out.append(
                Comparison(record["key"], "time_s", record.get("time_s"), None, f"no prediction: {exc}")
            )
    return out + _sustained([r for r in measured if r["kind"] == "sustained"], device)


def _value(quantity: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if quantity == "time_s":
        return f"{value * 1e6:.1f} us"
    if quantity == "step_time_s":
        return f"{value * 1e3:.2f} ms"
    if quantity == "peak_memory_bytes":
        return f"{value / 2**30:.2f} GiB"
    return f"{value:.1f} TFLOPS"


def format_table(comparisons: Sequence[Comparison], records: Sequence[Mapping[str, Any]]) -> str:
    """The predicted-vs-measured table (Markdown), with the run's device and failed items."""
    prov = next((r for r in records if r.get("kind") == "provenance"), {})
    out = ["# GPU calibration suite: predicted vs measured", ""]
    out += [
        f"- {k}: {prov.get(k)}"
        for k in ("date", "device_name", "device_spec", "size", "torch", "cuda", "monitor")
    ]
    out += ["", "| item | quantity | measured | predicted | error | note |", "|---|---|---|---|---|---|"]
    for c in comparisons:
        error = "-" if c.error_pct is None else f"{c.error_pct:+.1f}%"
        out.append(f"| {c.key} | {c.quantity} | {_value(c.quantity, c.measured)} | "
                   f"{_value(c.quantity, c.predicted)} | {error} | {c.note} |")  # fmt: skip
    failed = [r for r in records if "error" in r or "skipped" in r]
    if failed:
        out += ["", "## Not measured", ""] + [
            f"- {r['key']}: {r.get('error') or r.get('skipped')}" for r in failed
        ]
    return "\n".join(out) + "\n"
