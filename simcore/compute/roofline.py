"""How long a layer takes on one device: kernel classes on a roofline, plus the host's dispatch.

Each layer kind belongs to a kernel class with its own achieved efficiency
(``simcore/data/efficiency.yaml``, sources there):

- ``gemm`` (``linear``, ``attention_math``): forward, data-gradient and weight-gradient GEMMs, each
  at its own size on the curve ``peak * gemm_max * F / (F + peak * half_s)``, times the tile and
  wave quantisation of its output over the device's SMs when the layer records its GEMM shape;
- ``conv``: cuDNN convolutions on the same curve with the lower ``conv_max``;
- ``attention`` (fused, FlashAttention-style): ``attention_fwd_max`` forward and
  ``attention_bwd_max`` backward, whose FLOPs the workload states (2.5x forward; causal masking
  already halves the executed FLOPs of decoders);
- everything else (norms, activations, softmax, residual adds, pools, embeddings): the bytes they
  move at ``memory_efficiency`` of the datasheet bandwidth, except the eager decompositions whose
  achieved bandwidth is measured per kind and phase (RMSNorm, rotary, LayerNorm, SwiGLU, the loss:
  :mod:`simcore.compute.memory_kernels`); ``compiled`` (torch.compile) runs those as one fused kernel
  per pass, in the measured share of the eager time, dispatched as one operator.

A kernel takes ``max(FLOPs / achieved rate, bytes / achieved bandwidth)`` plus ``kernel_overhead_s``
on a GPU, plus, for a layer whose code syncs the host (``Layer.host_syncs``, per call: GPT-2's eager
attention of 2022, T5's fp16 overflow check), one exposed dispatch and launch per sync
(:func:`simcore.compute.host_syncs.host_sync_time_s`). Each class runs in its dtype (:mod:`simcore.compute.precision`): with ``--dtype fp32``
matmuls use the FP32 CUDA cores and convolutions TF32 where the device has it, as PyTorch defaults.

**Host dispatch.** Every layer also dispatches ``ops(kind, phase)`` ATen operators (table
``operators``, counted from a torch trace), each costing the host ``host_op_s`` (or a calibration
profile's measured ``op_overhead_s``). On a GPU the host enqueues kernels ahead of the device, so
a span of layers takes the longer of its kernel time and its dispatch time
(:meth:`ComputeModel.layer_parts_s` gives both); on a CPU rank the host does the arithmetic too, so
they add. A calibration profile's matmul curve replaces the GEMM curve (convolutions and attention
keep their ratio to it), its copy bandwidth the memory bandwidth.

Phases: ``"fwd"``; ``"bwd"`` (input and weight gradients: twice the forward FLOPs for matmuls and
convolutions, as two forward-sized kernels); ``"recompute"`` (the forward again inside backward
under activation checkpointing). Weights are read once per phase; backward also writes the weight
gradients.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from simcore.compute.eager_attention import attention_gemm_fraction
from simcore.compute.host_syncs import host_sync_time_s
from simcore.compute.memory_kernels import fused_time_ratios, memory_fractions, memory_kind
from simcore.compute.optimizer import OptimizerStepCost, optimizer_step_cost, resolve_optimizer_impl
from simcore.data import data_file
from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Layer, Workload

__all__ = [
    "KERNEL_CLASSES",
    "PHASES",
    "ComputeModel",
    "EfficiencyCurve",
    "efficiency_curve",
    "kernel_class",
    "layer_operator_count",
    "param_tensor_count",
    "software_eras",
]

PHASES = ("fwd", "bwd", "recompute")
KERNEL_CLASSES = ("gemm", "conv1x1", "conv", "conv_grouped", "attention", "memory")
_CLASS_OF_KIND = {
    "linear": "gemm",
    "attention_math": "gemm",
    "conv1x1": "conv1x1",  # cuDNN: a GEMM, at the convolutions' dtype
    "conv": "conv",
    "conv2d": "conv",
    "conv_grouped": "conv_grouped",
    "attention": "attention",
}

_EFFICIENCY_FILE = Path(__file__).parent.parent / "data" / "efficiency.yaml"
_TILE = 128  # cuBLAS/CUTLASS output tile edge of large GEMMs (gemm_shape source)
# a GEMM far past every measured size: the size curve's plateau rate (calibrated or not)
_PLATEAU_FLOPS = 1e18
_WAVED = ("gemm", "conv1x1")  # classes whose kernels are one GEMM each (tile/wave quantisation)


_REQUIRED_PLATEAUS = tuple(
    f"{cls}_max{suffix}" for cls in ("gemm", "conv", "conv_grouped") for suffix in ("", "_tf32", "_fp32")
)
# FP8 tensor-core GEMMs (convolutions run in 16 bits under FP8): a part without a figure of its own
# takes its 16-bit gemm_max
_FP8_PLATEAU = "gemm_max_fp8"
_PLATEAU_KEYS = (*_REQUIRED_PLATEAUS, _FP8_PLATEAU)
_CURVE_KEYS = (
    *_REQUIRED_PLATEAUS,
    "half_efficiency_time_s",
    "attention_fwd_max",
    "attention_bwd_max",
    "memory_efficiency",
    "kernel_overhead_s",
    "host_op_s",
    "sms",
)


@dataclass(frozen=True, slots=True)
class EfficiencyCurve:
    """Default achieved-efficiency figures of one device class (see ``data/efficiency.yaml``)."""

    max_efficiency: float  # GEMM plateau (16-bit tensor cores): achieved/peak FLOP/s of very large matmuls
    half_efficiency_time_s: float  # an operator this long at peak reaches half the plateau
    memory_efficiency: float  # achieved/datasheet memory bandwidth of streaming kernels
    kernel_overhead_s: float  # gap per kernel on the device
    conv_efficiency: float = 0.5  # plateau of cuDNN convolutions (16-bit tensor cores)
    attention_fwd_efficiency: float = 0.6  # plateau of the fused attention forward
    attention_bwd_efficiency: float = 0.48  # ... and backward
    host_op_s: tuple[float, float] = (8e-6, 9e-6)  # host dispatch per operator, (fwd, bwd)
    sms: int = 0  # streaming multiprocessors (0: no wave quantisation)
    # every plateau by class and dtype family: "<class>_max" (fp16/bf16), "_tf32", "_fp32"; "gemm_max_fp8"
    plateaus: Mapping[str, float] = field(default_factory=dict)

    def plateau(self, kernel: str, phase: str, dtype: str = "bf16") -> float:
        """The efficiency plateau of kernel class ``kernel`` in ``phase`` at ``dtype``."""
        if kernel == "attention":
            return self.attention_bwd_efficiency if phase == "bwd" else self.attention_fwd_efficiency
        cls = {"conv1x1": "conv", "conv": "conv", "conv_grouped": "conv_grouped"}.get(kernel, "gemm")
        suffix = {"tf32": "_tf32", "fp32": "_fp32", "fp8": "_fp8"}.get(dtype, "")
        key = f"{cls}_max{suffix}"
        if key in self.plateaus:
            return self.plateaus[key]
        return self.conv_efficiency if cls != "gemm" else self.max_efficiency


@functools.lru_cache(maxsize=1)
def _efficiency_table() -> dict[str, Any]:
    return dict(data_file(_EFFICIENCY_FILE.name))


def _curve_from(entry: dict[str, Any], where: str) -> EfficiencyCurve:
    unknown = sorted(set(entry) - {*_CURVE_KEYS, _FP8_PLATEAU})
    missing = [key for key in _CURVE_KEYS if key not in entry]
    if unknown or missing:
        bad = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        raise TrainsimError(f"{_EFFICIENCY_FILE.name}: {where}: {bad}; keys: {', '.join(_CURVE_KEYS)}")
    fwd, bwd = entry["host_op_s"]
    plateaus = {key: float(entry[key]) for key in _REQUIRED_PLATEAUS}
    plateaus[_FP8_PLATEAU] = float(entry.get(_FP8_PLATEAU, entry["gemm_max"]))
    return EfficiencyCurve(
        max_efficiency=float(entry["gemm_max"]),
        half_efficiency_time_s=float(entry["half_efficiency_time_s"]),
        memory_efficiency=float(entry["memory_efficiency"]),
        kernel_overhead_s=float(entry["kernel_overhead_s"]),
        conv_efficiency=float(entry["conv_max"]),
        attention_fwd_efficiency=float(entry["attention_fwd_max"]),
        attention_bwd_efficiency=float(entry["attention_bwd_max"]),
        host_op_s=(float(fwd), float(bwd)),
        sms=int(entry["sms"]),
        plateaus=MappingProxyType(plateaus),
    )


def efficiency_curve(device: DeviceSpec) -> EfficiencyCurve:
    """The default curve for ``device``: its kind's defaults, overridden by the first matching pattern."""
    table = _efficiency_table()
    if device.kind not in table["defaults"]:
        raise TrainsimError(
            f"no default efficiency for device kind {device.kind!r}; known: {', '.join(table['defaults'])}"
        )
    entry = dict(table["defaults"][device.kind])
    where = f"defaults.{device.kind}"
    for pattern, override in table["devices"].items():
        if fnmatch.fnmatchcase(device.name, pattern):
            entry.update(override)
            where = f"devices.{pattern}"
            break
    return _curve_from(entry, where)


def software_eras() -> tuple[str, ...]:
    """Names of the convolution-library eras of ``efficiency.yaml`` (``software_eras``)."""
    return tuple(_efficiency_table()["software_eras"])


def _with_software_era(curve: EfficiencyCurve, era: str) -> EfficiencyCurve:
    """``curve`` with the plateaus of software era ``era`` (a stack older than the curve's)."""
    eras = _efficiency_table()["software_eras"]
    if era not in eras:
        raise TrainsimError(f"unknown software era {era!r}; allowed: {', '.join(eras)}")
    override = {str(k): float(v) for k, v in (eras[era] or {}).items()}
    unknown = sorted(set(override) - set(_PLATEAU_KEYS))
    if unknown:
        raise TrainsimError(
            f"{_EFFICIENCY_FILE.name}: software_eras.{era}.{unknown[0]} is not a plateau; "
            f"allowed: {', '.join(_PLATEAU_KEYS)}"
        )
    if not override:
        return curve
    older = {key: min(value, curve.plateaus.get(key, value)) for key, value in override.items()}
    return replace(curve, plateaus=MappingProxyType({**curve.plateaus, **older}))


def kernel_class(kind: str) -> str:
    """The kernel class of a layer kind: gemm, conv, conv_grouped, attention or memory."""
    return _CLASS_OF_KIND.get(kind, "memory")


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
    import numpy as np

    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch <= 0:
        raise TrainsimError(f"batch must be a positive integer, got {batch!r}")


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise TrainsimError(f"unknown phase {phase!r}; allowed: {', '.join(PHASES)}")


def _class_dtypes(device: DeviceSpec, dtype: str) -> dict[str, str]:
    """The dtype each kernel class runs in for compute dtype ``dtype`` (see the module docstring)."""
    low = "bf16" if dtype == "fp8" else dtype
    if dtype in ("fp32", "tf32"):
        conv = "tf32" if "tf32" in device.peak_flops else "fp32"  # cudnn.allow_tf32 defaults to True
        return {"gemm": dtype, "conv1x1": conv, "conv": conv, "conv_grouped": conv, "attention": dtype}
    return {"gemm": dtype, "conv1x1": low, "conv": low, "conv_grouped": low, "attention": low}


def _wave_factor(rows: np.ndarray, cols: np.ndarray, reduction: np.ndarray, sms: int) -> np.ndarray:
    """Tile and wave quantisation of GEMMs with ``rows x cols`` outputs (gemm_shape source); a
    GEMM with fewer tiles than SMs is split along its ``reduction`` dimension (split-K)."""
    import numpy as np

    tiles = np.ceil(rows / _TILE) * np.ceil(cols / _TILE)
    tile_use = rows * cols / (tiles * _TILE * _TILE)
    splits = np.clip(
        np.minimum(np.floor(sms / np.maximum(tiles, 1)), np.ceil(reduction / (4 * _TILE))), 1, None
    )
    units = tiles * splits
    waves = units / sms
    return tile_use * waves / np.ceil(waves)


class ComputeModel:
    """Per-layer compute time of one device at one compute dtype, optionally calibrated."""

    def __init__(
        self,
        device: DeviceSpec,
        dtype: str,
        calibration: CalibrationProfile | None = None,
        *,
        compiled: bool = False,
        software_era: str = "current",
    ) -> None:
        if dtype not in DTYPE_BYTES:
            raise TrainsimError(f"unknown dtype {dtype!r}; allowed: {', '.join(sorted(DTYPE_BYTES))}")
        self.device = device
        self.dtype = dtype
        self.calibration = calibration
        self.class_dtypes = _class_dtypes(device, dtype)
        self.peaks = {cls: device.flops(dt) for cls, dt in self.class_dtypes.items()}
        self.peak_flops = self.peaks["gemm"]
        self.curve = _with_software_era(efficiency_curve(device), software_era)
        measured_bw = calibration.memory_bandwidth_Bps if calibration is not None else None
        self.memory_bandwidth_Bps = measured_bw or device.memory_bandwidth_Bps * self.curve.memory_efficiency
        # eager memory-bound kernels by kind: their fraction relative to a streaming kernel's, so a
        # calibrated copy bandwidth scales them too (memory_kernels.yaml)
        self._kind_bandwidth_ratio = {
            kind: (fwd / self.curve.memory_efficiency, bwd / self.curve.memory_efficiency)
            for kind, (fwd, bwd) in memory_fractions(device).items()
        }
        # compiled (torch.compile): those kinds run as one fused kernel per pass, in the measured
        # share of the eager chain's time, dispatched as one operator
        self.compiled = compiled
        self._fused_kinds = frozenset(fused_time_ratios(device)) if compiled else frozenset()
        # eager attention's batched GEMMs (head-dim-sized side): their bytes at their measured
        # fraction, relative to a streaming kernel's (eager_attention.yaml); (1, 1) where none is published
        gemm_fraction = attention_gemm_fraction(device)
        self._attention_gemm_ratio = (
            (gemm_fraction[0] / self.curve.memory_efficiency, gemm_fraction[1] / self.curve.memory_efficiency)
            if gemm_fraction is not None
            else (1.0, 1.0)
        )
        if compiled:
            for kind, (fwd, bwd) in fused_time_ratios(device).items():
                eager = self._kind_bandwidth_ratio.get(kind, (1.0, 1.0))
                self._kind_bandwidth_ratio[kind] = (eager[0] / fwd, eager[1] / bwd)
        self._calibrated = {
            cls: calibration is not None and calibration.compute_rate(1e9, dt) is not None
            for cls, dt in self.class_dtypes.items()
        }
        self._element_bytes = DTYPE_BYTES["bf16" if dtype == "fp8" else dtype]
        self.op_overhead_s: dict[str, float] = dict(getattr(calibration, "op_overhead_s", None) or {})
        self._host_runs_arithmetic = device.kind == "cpu"
        self._cache: dict[tuple[int, int, str], tuple[Workload, np.ndarray, np.ndarray]] = {}
        self._combined: dict[tuple[int, int, str], tuple[Workload, np.ndarray]] = {}

    # -- rates ---------------------------------------------------------------------------------------

    def achieved_flops(
        self, flops: float | np.ndarray, kernel: str = "gemm", phase: str = "fwd"
    ) -> np.ndarray:
        """Achieved FLOP/s of ``kernel``-class operators of ``flops`` FLOPs each (array in, array out)."""
        import numpy as np

        sizes = np.asarray(flops, dtype=float)
        dtype = self.class_dtypes.get(kernel, self.dtype)
        plateau = self.curve.plateau(kernel, phase, dtype)
        if self._calibrated.get(kernel, self._calibrated["gemm"]) and self.calibration is not None:
            rate, dt = self.calibration.compute_rate, dtype
            # the measured matmul curve, scaled by this class's plateau relative to the GEMMs'
            ratio = plateau / self.curve.plateau("gemm", phase, self.class_dtypes["gemm"])
            measured = [(rate(float(f), dt) or self.peak_flops) * ratio for f in sizes.ravel()]
            return np.array(measured).reshape(sizes.shape)
        peak = self.peaks.get(kernel, self.peak_flops)
        half = peak * self.curve.half_efficiency_time_s
        return peak * plateau * sizes / (sizes + half)

    def host_op_s(self, phase: str) -> float:
        """Host seconds per dispatched operator in ``phase``: measured if calibrated, else the default."""
        key = "bwd" if phase == "bwd" else "fwd"
        if self.op_overhead_s:
            return float(self.op_overhead_s.get(key, self.op_overhead_s.get("fwd", 0.0)))
        return self.curve.host_op_s[1 if key == "bwd" else 0]

    def combine(self, kernel_s: float | np.ndarray, host_s: float | np.ndarray) -> np.ndarray:
        """Wall time of kernels and their dispatch: the longer on a GPU, the sum on a CPU rank."""
        import numpy as np

        kernel, host = np.asarray(kernel_s, dtype=float), np.asarray(host_s, dtype=float)
        return kernel + host if self._host_runs_arithmetic else np.maximum(kernel, host)

    # -- per layer -----------------------------------------------------------------------------------

    def _gemm_quantisation(self, layers: tuple[Layer, ...], batch: int, phase: str) -> np.ndarray:
        """Per layer and GEMM (columns: forward, data-gradient, weight-gradient) wave factor."""
        import numpy as np

        factors = np.ones((len(layers), 3))
        sms = self.curve.sms
        if sms <= 0:
            return factors
        shaped = [(i, lay.gemm) for i, lay in enumerate(layers) if lay.gemm is not None]
        if not shaped:
            return factors
        index = np.array([i for i, _ in shaped])
        m, k, n = (np.array([float(g[j]) for _, g in shaped]) * (batch if j == 0 else 1) for j in range(3))
        factors[index, 0] = _wave_factor(m, n, k, sms)
        factors[index, 1] = _wave_factor(m, k, n, sms)
        factors[index, 2] = _wave_factor(k, n, m, sms)
        return factors

    def _wave_excess_s(self, flops: np.ndarray, wave: np.ndarray, kernel: str, phase: str) -> np.ndarray:
        """Seconds that tile/wave quantisation (factor ``wave`` <= 1) adds to GEMMs of ``flops``: their
        arithmetic at the class's plateau rate, stretched by 1 / wave."""
        plateau_rate = self.achieved_flops(_PLATEAU_FLOPS, kernel, phase)
        return flops / plateau_rate * (1.0 / wave - 1.0)

    def _kernel_times(self, layers: tuple[Layer, ...], batch: int, phase: str) -> np.ndarray:
        import numpy as np

        count = len(layers)
        classes = [kernel_class(lay.kind) for lay in layers]
        fwd = np.fromiter((lay.fwd_flops for lay in layers), float, count) * batch
        bwd = np.fromiter((lay.bwd_flops for lay in layers), float, count) * batch
        mem = np.fromiter((lay.memory_bytes for lay in layers), float, count) * batch
        weights = np.fromiter((lay.params for lay in layers), float, count) * self._element_bytes
        compute = np.zeros(count)
        waves = self._gemm_quantisation(layers, batch, phase)
        for cls in ("gemm", "conv1x1", "conv", "conv_grouped", "attention"):
            chosen = np.array([c == cls for c in classes]) & (fwd > 0)
            if not chosen.any():
                continue
            # Tile/wave quantisation wastes part of the tiles' arithmetic: it stretches the kernel's
            # work at the plateau rate by 1/w, not its fixed latency (the size curve's half-efficiency
            # term, s / rate - s / plateau rate); dividing the whole time by w made a tiny GEMM (a
            # 10-class head, one token) take w ~ 1e-5 times its launch latency: 0.5 s for ResNet's fc
            if phase != "bwd":
                rate = self.achieved_flops(fwd[chosen], cls, phase)
                compute[chosen] = fwd[chosen] / rate
                if cls in _WAVED:
                    compute[chosen] += self._wave_excess_s(fwd[chosen], waves[chosen, 0], cls, phase)
            elif cls == "attention":
                compute[chosen] = bwd[chosen] / self.achieved_flops(bwd[chosen], cls, "bwd")
            else:  # data- and weight-gradient kernels, each the size of the forward's
                half = bwd[chosen] / 2.0
                rate = self.achieved_flops(half, cls, "bwd")
                compute[chosen] = 2.0 * half / rate
                if cls in _WAVED:
                    for column in (1, 2):
                        compute[chosen] += self._wave_excess_s(half, waves[chosen, column], cls, "bwd")
        column = 1 if phase == "bwd" else 0
        if phase == "bwd":
            mem = mem * np.fromiter((lay.bwd_bytes_ratio for lay in layers), float, count)
            weights = 2.0 * weights
        # memory-bound kernels between a layer's GEMMs (eager attention): their bytes add to the time
        serial = mem * np.fromiter((lay.serial_fraction[column] for lay in layers), float, count)
        kernels = 2.0 if phase == "bwd" else 1.0
        gaps = 0.0 if self._host_runs_arithmetic else kernels * self.curve.kernel_overhead_s
        bandwidth = self._bandwidths(layers, classes, phase)
        # the GEMMs of eager attention move their bytes at their own measured bandwidth
        eager = np.fromiter((lay.kind == "attention_math" for lay in layers), bool, count)
        gemm_bandwidth = np.where(eager, bandwidth * self._attention_gemm_ratio[column], bandwidth)
        syncs = self._sync_times(layers, phase)
        return (
            np.maximum(compute, (mem - serial + weights) / gemm_bandwidth) + serial / bandwidth + gaps + syncs
        )

    def _sync_times(self, layers: tuple[Layer, ...], phase: str) -> np.ndarray | float:
        """Seconds the device idles per layer after its host syncs in ``phase`` (per call, whatever
        the batch: :func:`simcore.compute.host_syncs.host_sync_time_s`); recompute is a forward."""
        import numpy as np

        column = 1 if phase == "bwd" else 0
        counts = np.fromiter((lay.host_syncs[column] for lay in layers), float, len(layers))
        if not counts.any():
            return 0.0
        one = host_sync_time_s(1.0, self.host_op_s(phase), device_kind=self.device.kind)
        return counts * one

    def _bandwidths(self, layers: tuple[Layer, ...], classes: list[str], phase: str) -> np.ndarray:
        """Achieved memory bandwidth per layer: a memory-class layer of a kind with a measured eager
        figure (:mod:`simcore.compute.memory_kernels`) at that figure in ``phase``, the rest at
        ``memory_bandwidth_Bps``."""
        import numpy as np

        column = 1 if phase == "bwd" else 0
        ratios = self._kind_bandwidth_ratio
        scale = [
            ratios[kind][column] if cls == "memory" and (kind := memory_kind(lay)) in ratios else 1.0
            for lay, cls in zip(layers, classes, strict=True)
        ]
        return self.memory_bandwidth_Bps * np.array(scale, dtype=float)

    def _host_times(self, layers: tuple[Layer, ...], phase: str) -> np.ndarray:
        import numpy as np

        fused = self._fused_kinds
        ops = np.array(
            [1 if memory_kind(lay) in fused else layer_operator_count(lay.kind, phase) for lay in layers],
            dtype=float,
        )
        return ops * self.host_op_s(phase)

    def layer_parts_s(self, workload: Workload, batch: int, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """(kernel seconds, host dispatch seconds) per layer, cached per (workload, batch, phase)."""
        _check_batch(batch)
        _check_phase(phase)
        key = (id(workload), int(batch), phase)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is workload:
            return hit[1], hit[2]
        kernel = self._kernel_times(workload.layers, int(batch), phase)
        host = self._host_times(workload.layers, phase)
        kernel.setflags(write=False)
        host.setflags(write=False)
        self._cache[key] = (workload, kernel, host)
        return kernel, host

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        """Seconds for ``layer`` on a micro-batch of ``batch`` samples in ``phase``."""
        _check_batch(batch)
        _check_phase(phase)
        kernel = self._kernel_times((layer,), int(batch), phase)
        return float(self.combine(kernel, self._host_times((layer,), phase))[0])

    def layer_times_s(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        """Seconds per layer of ``workload`` (in layer order), each layer on its own."""
        kernel, host = self.layer_parts_s(workload, batch, phase)
        key = (id(workload), int(batch), phase)
        hit = self._combined.get(key)
        if hit is not None and hit[0] is workload:
            return hit[1]
        times = self.combine(kernel, host)
        times.setflags(write=False)
        self._combined[key] = (workload, times)
        return times

    def block_times_s(self, workload: Workload, batch: int, phase: str) -> np.ndarray:
        """Seconds per block (``workload.block_names`` order); layers outside blocks are left out."""
        import numpy as np

        kernel, host = self.layer_parts_s(workload, batch, phase)
        return np.array(
            [
                float(self.combine(kernel[list(g)].sum(), host[list(g)].sum()))
                for g in workload.block_layer_indices()
            ]
        )

    def phase_time_s(self, workload: Workload, batch: int, phase: str) -> float:
        """Seconds for the whole model in one phase (the host running ahead over all of it on a GPU)."""
        kernel, host = self.layer_parts_s(workload, batch, phase)
        return float(self.combine(kernel.sum(), host.sum()))

    # -- optimizer -----------------------------------------------------------------------------------

    def optimizer_step_time_s(self, cost: OptimizerStepCost, *, host_factor: float = 1.0) -> float:
        """Seconds of one optimizer step: its bytes and kernel gaps on the device, its operator
        dispatches (each ``host_factor`` operators' worth, e.g. on DTensors) on the host."""
        if cost.bytes_moved <= 0:
            return 0.0
        gaps = 0.0 if self._host_runs_arithmetic else cost.kernels * self.curve.kernel_overhead_s
        device = cost.bytes_moved / self.memory_bandwidth_Bps + gaps
        host = cost.host_ops * host_factor * self.host_op_s("fwd")
        return float(self.combine(device, host))

    def optimizer_time_s(
        self,
        params: int,
        optimizer: str,
        *,
        impl: str = "auto",
        tensors: int | None = None,
        state_bytes: int = 4,
    ) -> float:
        """Seconds to update ``params`` fp32 parameters held in ``tensors`` tensors (default: one
        per million parameters) with ``impl`` (default: torch's choice on this device)."""
        if params < 0:
            raise TrainsimError(f"params must be >= 0, got {params}")
        chosen = resolve_optimizer_impl(impl, self.device.kind)
        count = tensors if tensors is not None else max(1, math.ceil(params / 1e6))
        cost = optimizer_step_cost(optimizer, chosen, float(params), count, state_bytes)
        return self.optimizer_step_time_s(cost)

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
        as DDP does; a sharded strategy passes its shard) with torch's default implementation.
        """
        total = self.phase_time_s(workload, batch, "fwd") + self.phase_time_s(workload, batch, "bwd")
        if recompute:
            total += self.phase_time_s(workload, batch, "recompute")
        if optimizer is not None:
            count = workload.params if optimizer_params is None else optimizer_params
            total += self.optimizer_time_s(count, optimizer, tensors=param_tensor_count(workload))
        return total
