"""How long a layer takes on one device: a roofline with a size-dependent compute efficiency.

For one operator of ``F`` FLOPs moving ``B`` bytes in a phase:

    time = max(F / achieved_flops(F), B / memory_bandwidth) + kernel_overhead

``achieved_flops`` comes from the calibration profile's ``compute_rate(F, dtype)`` when it has one
for the dtype, else from the default curve ``peak(dtype) * max_eff * F / (F + half_flops)`` in
``simcore/data/efficiency.yaml`` (the sources of its figures are there). ``memory_bandwidth`` is the
profile's measured bandwidth, else the datasheet figure times the default memory efficiency.

**Framework overhead per operator.** With a calibration profile that measured it
(``op_overhead_s``), every layer is also charged ``ops(kind, phase) * op_overhead_s[phase]``: the
ATen operators a layer of that kind dispatches (table ``operators`` in ``data/efficiency.yaml``,
counted from a torch trace) times the measured host cost of one. On a CPU rank the host runs the
arithmetic too, so the two add up; on a GPU the host enqueues kernels ahead of the device, so a
layer takes the longer of its kernel time and its dispatch time. Without that measurement the
per-kernel ``kernel_overhead_s`` of the efficiency table applies, as before. The optimizer's
for-loop implementation (the CPU default) dispatches a few operators per parameter tensor
(:meth:`ComputeModel.optimizer_dispatch_s`).

Phases: ``"fwd"``; ``"bwd"`` (input and weight gradients: twice the forward FLOPs, run as two
forward-sized kernels, so the efficiency is looked up at the forward size); ``"recompute"`` (the
forward run again inside backward under activation checkpointing). Weights are read once per
phase; backward also writes the weight gradients.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Layer, Workload

__all__ = [
    "OPTIMIZER_BYTES_PER_PARAM",
    "PHASES",
    "ComputeModel",
    "EfficiencyCurve",
    "efficiency_curve",
    "layer_operator_count",
    "param_tensor_count",
]

PHASES = ("fwd", "bwd", "recompute")

# Bytes of memory traffic per parameter of one optimizer step with fp32 parameters and state, as
# PyTorch's foreach implementations do it (torch/optim/{sgd,adam,adamw}.py): SGD reads the
# parameter and gradient and writes the parameter (3 x 4 B); momentum adds a read and a write of
# its buffer (5 x 4 B); Adam/AdamW read p, g, m, v and write p, m, v (7 x 4 B).
OPTIMIZER_BYTES_PER_PARAM: dict[str, int] = {"sgd": 12, "sgd-momentum": 20, "adam": 28, "adamw": 28}

_EFFICIENCY_FILE = Path(__file__).parent.parent / "data" / "efficiency.yaml"
_CURVE_KEYS = ("max_efficiency", "half_efficiency_time_s", "memory_efficiency", "kernel_overhead_s")


@dataclass(frozen=True, slots=True)
class EfficiencyCurve:
    """Default achieved-efficiency figures of one device class (see ``data/efficiency.yaml``)."""

    max_efficiency: float  # plateau of achieved/peak FLOP/s for very large operators
    half_efficiency_time_s: float  # an operator this long at peak reaches half the plateau
    memory_efficiency: float  # achieved/datasheet memory bandwidth of streaming kernels
    kernel_overhead_s: float  # fixed cost per operator and phase


@functools.lru_cache(maxsize=1)
def _efficiency_table() -> dict[str, Any]:
    import yaml

    with _EFFICIENCY_FILE.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _curve_from(entry: dict[str, Any], where: str) -> EfficiencyCurve:
    if sorted(entry) != sorted(_CURVE_KEYS):
        raise TrainsimError(
            f"{_EFFICIENCY_FILE.name}: {where} needs exactly the keys {', '.join(_CURVE_KEYS)}"
        )
    return EfficiencyCurve(**{key: float(entry[key]) for key in _CURVE_KEYS})


def efficiency_curve(device: DeviceSpec) -> EfficiencyCurve:
    """The default curve for ``device``: the first matching name pattern, else its kind's default."""
    table = _efficiency_table()
    for pattern, entry in table["devices"].items():
        if fnmatch.fnmatchcase(device.name, pattern):
            return _curve_from(entry, f"devices.{pattern}")
    if device.kind not in table["defaults"]:
        raise TrainsimError(
            f"no default efficiency for device kind {device.kind!r}; known: {', '.join(table['defaults'])}"
        )
    return _curve_from(table["defaults"][device.kind], f"defaults.{device.kind}")


def layer_operator_count(kind: str, phase: str) -> int:
    """Torch operators one layer of ``kind`` dispatches in ``phase`` (recompute counts as forward)."""
    table = _efficiency_table()["operators"]
    fwd, bwd = table["per_layer"].get(kind, table["default"])
    return int(bwd if phase == "bwd" else fwd)


def param_tensor_count(workload: Workload) -> int:
    """Parameter tensors of ``workload`` (weights and biases), as an optimizer iterates over them."""
    per_kind = _efficiency_table()["operators"]["param_tensors"]
    return sum(int(per_kind.get(layer.kind, 1)) for layer in workload.layers if layer.params > 0)


def _check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch <= 0:
        raise TrainsimError(f"batch must be a positive integer, got {batch!r}")


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise TrainsimError(f"unknown phase {phase!r}; allowed: {', '.join(PHASES)}")


class ComputeModel:
    """Per-layer compute time of one device at one dtype, optionally calibrated."""

    def __init__(self, device: DeviceSpec, dtype: str, calibration: CalibrationProfile | None = None) -> None:
        if dtype not in DTYPE_BYTES:
            raise TrainsimError(f"unknown dtype {dtype!r}; allowed: {', '.join(sorted(DTYPE_BYTES))}")
        self.device = device
        self.dtype = dtype
        self.calibration = calibration
        self.peak_flops = device.flops(dtype)
        self.curve = efficiency_curve(device)
        self._half_flops = self.peak_flops * self.curve.half_efficiency_time_s
        measured_bw = calibration.memory_bandwidth_Bps if calibration is not None else None
        self.memory_bandwidth_Bps = measured_bw or device.memory_bandwidth_Bps * self.curve.memory_efficiency
        self._calibrated_compute = (
            calibration is not None and calibration.compute_rate(1e9, dtype) is not None
        )
        self._element_bytes = DTYPE_BYTES[dtype]
        self.op_overhead_s: dict[str, float] = dict(getattr(calibration, "op_overhead_s", None) or {})
        self._host_runs_arithmetic = device.kind == "cpu"
        self._cache: dict[tuple[int, int, str], tuple[Workload, np.ndarray]] = {}

    # -- rates ---------------------------------------------------------------------------------------

    def achieved_flops(self, flops: float | np.ndarray) -> np.ndarray:
        """Achieved FLOP/s for operators of ``flops`` FLOPs each (array in, array out)."""
        sizes = np.asarray(flops, dtype=float)
        if self._calibrated_compute and self.calibration is not None:
            rate = self.calibration.compute_rate
            return np.array([rate(float(f), self.dtype) or self.peak_flops for f in sizes.ravel()]).reshape(
                sizes.shape
            )
        return self.peak_flops * self.curve.max_efficiency * sizes / (sizes + self._half_flops)

    def _op_overhead(self, phase: str) -> float | None:
        """Measured seconds per dispatched operator in ``phase``, None when not calibrated."""
        if not self.op_overhead_s:
            return None
        key = "bwd" if phase == "bwd" else "fwd"
        return self.op_overhead_s.get(key, self.op_overhead_s.get("fwd"))

    def _with_dispatch(self, kernel_s: np.ndarray, ops: np.ndarray, phase: str) -> np.ndarray:
        """Kernel time plus (CPU) or overlapped with (GPU) the host's dispatch of ``ops`` operators."""
        per_op = self._op_overhead(phase)
        if per_op is None:
            return kernel_s
        dispatch = ops * per_op
        return kernel_s + dispatch if self._host_runs_arithmetic else np.maximum(kernel_s, dispatch)

    def _layer_ops(self, kinds: list[str], phase: str) -> np.ndarray:
        return np.array([layer_operator_count(kind, phase) for kind in kinds], dtype=float)

    def _times(
        self,
        fwd_flops: np.ndarray,
        mem_bytes: np.ndarray,
        params: np.ndarray,
        batch: int,
        phase: str,
        kinds: list[str] | None = None,
    ) -> np.ndarray:
        kernel_flops = batch * fwd_flops
        weight_bytes = params * self._element_bytes
        if phase == "bwd":
            flops, moved, kernels = 2.0 * kernel_flops, 2.0 * (batch * mem_bytes + weight_bytes), 2.0
        else:
            flops, moved, kernels = kernel_flops, batch * mem_bytes + weight_bytes, 1.0
        compute = np.zeros_like(flops)
        busy = flops > 0
        compute[busy] = flops[busy] / self.achieved_flops(kernel_flops[busy])
        memory = moved / self.memory_bandwidth_Bps
        if self._op_overhead(phase) is not None and kinds is not None:
            # the measured per-operator cost replaces the default per-kernel gap
            return self._with_dispatch(np.maximum(compute, memory), self._layer_ops(kinds, phase), phase)
        return np.maximum(compute, memory) + kernels * self.curve.kernel_overhead_s

    # -- per layer -----------------------------------------------------------------------------------

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        """Seconds for ``layer`` on a micro-batch of ``batch`` samples in ``phase``."""
        _check_batch(batch)
        _check_phase(phase)
        fwd = np.array([layer.fwd_flops if phase != "bwd" else layer.bwd_flops / 2.0])
        times = self._times(
            fwd, np.array([layer.memory_bytes]), np.array([float(layer.params)]), batch, phase, [layer.kind]
        )
        return float(times[0])

    def layer_times_s(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        """Seconds per layer of ``workload`` (in layer order), computed once per (workload, batch, phase)."""
        _check_batch(batch)
        _check_phase(phase)
        key = (id(workload), int(batch), phase)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is workload:
            return hit[1]
        layers = workload.layers
        fwd = np.fromiter(
            (lay.bwd_flops / 2.0 if phase == "bwd" else lay.fwd_flops for lay in layers), float, len(layers)
        )
        mem = np.fromiter((lay.memory_bytes for lay in layers), float, len(layers))
        params = np.fromiter((lay.params for lay in layers), float, len(layers))
        times = self._times(fwd, mem, params, int(batch), phase, [lay.kind for lay in layers])
        times.setflags(write=False)
        self._cache[key] = (workload, times)
        return times

    def block_times_s(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        """Seconds per block (``workload.block_names`` order); layers outside blocks are left out."""
        times = self.layer_times_s(workload, batch, phase)
        return np.array([times[list(group)].sum() for group in workload.block_layer_indices()])

    def phase_time_s(self, workload: Workload, batch: int, phase: str) -> float:
        """Seconds for the whole model in one phase."""
        return float(self.layer_times_s(workload, batch, phase).sum())

    # -- whole step ----------------------------------------------------------------------------------

    def optimizer_time_s(self, params: int, optimizer: str) -> float:
        """Seconds to update ``params`` parameters: memory-bound (fp32 parameters and state)."""
        if optimizer not in OPTIMIZER_BYTES_PER_PARAM:
            raise TrainsimError(
                f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZER_BYTES_PER_PARAM)}"
            )
        if params < 0:
            raise TrainsimError(f"params must be >= 0, got {params}")
        if params == 0:
            return 0.0
        moved = params * OPTIMIZER_BYTES_PER_PARAM[optimizer]
        return moved / self.memory_bandwidth_Bps + self.curve.kernel_overhead_s

    def optimizer_dispatch_s(self, tensors: int, optimizer: str) -> float:
        """Host seconds of the optimizer's per-tensor operators, beyond :meth:`optimizer_time_s`.

        Charged on CPU ranks with a calibrated per-operator overhead: torch.optim's for-loop
        implementation (the CPU default) dispatches a few operators per parameter tensor. On GPUs
        the default foreach/fused implementations launch a few kernels for all tensors: 0.
        """
        per_op = self._op_overhead("fwd")
        if per_op is None or not self._host_runs_arithmetic or tensors <= 0:
            return 0.0
        per_tensor = _efficiency_table()["operators"]["optimizer_per_tensor"]
        if optimizer not in per_tensor:
            raise TrainsimError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(per_tensor)}")
        return tensors * int(per_tensor[optimizer]) * per_op

    def step_compute_time_s(
        self,
        workload: Workload,
        batch: int,
        *,
        recompute: bool = False,
        optimizer: str | None = None,
        optimizer_params: int | None = None,
    ) -> float:
        """Compute seconds of one step on one device, with no communication.

        Forward + backward (+ a second forward when ``recompute``, i.e. full activation
        checkpointing) + the optimizer update of ``optimizer_params`` parameters (default: all,
        as DDP does; a sharded strategy passes its shard).
        """
        total = self.phase_time_s(workload, batch, "fwd") + self.phase_time_s(workload, batch, "bwd")
        if recompute:
            total += self.phase_time_s(workload, batch, "recompute")
        if optimizer is not None:
            count = workload.params if optimizer_params is None else optimizer_params
            total += self.optimizer_time_s(count, optimizer)
            total += self.optimizer_dispatch_s(param_tensor_count(workload), optimizer)
        return total
