"""Single-GPU kernel rows: square matmuls and one transformer block, on one device spec.

``matmul``: a square GEMM of ``n`` (``2 n^3`` FLOPs; reads A and B, writes C) is one
:class:`~simcore.workload.types.Layer` priced by :class:`simcore.compute.roofline.ComputeModel`
(roofline + efficiency curve + kernel overhead, as every layer of a training step); the metric is
the best ``2 n^3 / time`` over the sizes the benchmark ran.

``layer``: the first block of a model preset at each (batch, sequence) of the benchmark's sweep,
forward + backward on the device; the FLOPs are the benchmark's own formula (mli's
``layer_benchmark``: ``3 x (16 b s h^2 + 4 b h s^2 + 8 b s h^2)``, ``h`` = hidden size), so the
simulated time is the only thing that differs from how the row was computed. The benchmark's
input (``X = torch.randn(b, s, h).half().cuda()``) has no ``requires_grad``, so the block's
operators that read it directly (``input_grad_free``: BERT's query/key/value projections, GPT-2's
and T5's first norm) compute their weights' gradients only
(:func:`simcore.workload.models.transformer.without_input_gradient`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from experiments.validate_published.base import (
    ATTENTION,
    Prediction,
    attention_mode,
    first_known,
    missing_name,
    name_list,
    positive_int,
    positive_ints,
)
from simcore.compute.roofline import ComputeModel
from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.hardware import device_names, device_spec
from simcore.workload.loader import load_workload, preset_names
from simcore.workload.models.transformer import without_input_gradient
from simcore.workload.types import Layer, Workload

__all__ = [
    "LAYER_KEYS",
    "LAYER_METRICS",
    "MATMUL_KEYS",
    "MATMUL_METRICS",
    "LayerSetup",
    "MatmulSetup",
    "parse_layer",
    "parse_matmul",
]

MATMUL_KEYS = ("device", "dtype", "sizes")
MATMUL_METRICS = ("matmul_tflops",)
LAYER_KEYS = ("device", "model", "dtype", "batches", "seq_lens", "hidden", "attention", "input_grad_free")
LAYER_METRICS = ("layer_tflops",)


def _device_names() -> list[str]:
    return device_names()


def _model_names() -> list[str]:
    return preset_names()


def _device_missing(names: tuple[str, ...], dtype: str) -> list[str]:
    name = first_known(names, _device_names)
    if name is None:
        return [missing_name("device spec", names)]
    if dtype not in device_spec(name).peak_flops:
        return [f"device spec {name!r} has no {dtype} rate"]
    return []


def _compute_model(names: tuple[str, ...], dtype: str) -> Any:
    return ComputeModel(device_spec(first_known(names, _device_names) or names[0]), dtype)


def _dtype(entry: Mapping[str, Any], where: str) -> str:
    dtype = entry.get("dtype")
    if dtype not in DTYPE_BYTES:
        raise TrainsimError(f"{where}: dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
    return str(dtype)


@dataclass(frozen=True, slots=True)
class MatmulSetup:
    """Square matmuls of ``sizes`` in ``dtype`` on a device spec."""

    devices: tuple[str, ...]
    dtype: str
    sizes: tuple[int, ...]
    # every kernel's time multiplied by this (the calibrated column's one scalar; 1 = shipped)
    compute_scale: float = 1.0

    def missing(self) -> list[str]:
        return _device_missing(self.devices, self.dtype)

    def describe(self) -> str:
        device = first_known(self.devices, _device_names) or self.devices[0]
        return f"{self.dtype} square matmul n = {', '.join(map(str, self.sizes))} on {device}"

    def predict(self, metric: str) -> Prediction:
        model = _compute_model(self.devices, self.dtype)
        word = DTYPE_BYTES[self.dtype]
        best, best_n = 0.0, self.sizes[0]
        for n in self.sizes:
            flops = 2.0 * n**3
            gemm = Layer(
                "matmul", "linear", -1, n * n, flops, 2 * flops, 0.0, n * n * word, 2.0 * n * n * word
            )
            rate = flops / (model.layer_time_s(gemm, 1, "fwd") * self.compute_scale) / 1e12
            if rate > best:
                best, best_n = rate, n
        return Prediction(best, f"{self.describe()}; best at n = {best_n}")


@dataclass(frozen=True, slots=True)
class LayerSetup:
    """One block of a model preset, forward + backward, over a (batch, sequence) sweep."""

    devices: tuple[str, ...]
    models: tuple[str, ...]
    dtype: str
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    hidden: int
    attention: str = "preset"
    compute_scale: float = 1.0  # as MatmulSetup's
    # layers of the block (names after "block0.") that read the benchmark's input, which needs no gradient
    input_grad_free: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        reasons = _device_missing(self.devices, self.dtype)
        if first_known(self.models, _model_names) is None:
            reasons.append(missing_name("model preset", self.models))
        return reasons

    def describe(self) -> str:
        device = first_known(self.devices, _device_names) or self.devices[0]
        model = first_known(self.models, _model_names) or self.models[0]
        return (
            f"one {model} block fwd+bwd, {self.dtype}, batch {min(self.batches)}..{max(self.batches)}, "
            f"seq {', '.join(map(str, self.seq_lens))} on {device}"
            + (f", {self.attention} attention" if self.attention != "preset" else "")
        )

    def predict(self, metric: str) -> Prediction:
        model = _compute_model(self.devices, self.dtype)
        name = first_known(self.models, _model_names) or self.models[0]
        h = float(self.hidden)
        best, at = 0.0, ""
        for s in self.seq_lens:
            workload = self._leaf_input(
                load_workload(name, seq_len=s, dtype=self.dtype, flash_attention=ATTENTION[self.attention])
            )
            block = list(workload.block_layer_indices()[0])
            for b in self.batches:
                seconds = self.compute_scale * sum(
                    float(model.layer_times_s(workload, b, p)[block].sum()) for p in ("fwd", "bwd")
                )
                flops = 3.0 * (16 * b * s * h * h + 4 * b * h * s * s + 8 * b * s * h * h)
                if flops / seconds / 1e12 > best:
                    best, at = flops / seconds / 1e12, f"batch {b}, seq {s}"
        return Prediction(best, f"{self.describe()}; best at {at}")

    def _leaf_input(self, workload: Workload) -> Workload:
        """``workload`` with the first block's ``input_grad_free`` layers computing weight gradients only."""
        if not self.input_grad_free:
            return workload
        first = workload.block_names[0]
        names = {f"{first}.{name}" for name in self.input_grad_free}
        found = {layer.name for layer in workload.layers} & names
        if found != names:
            raise TrainsimError(
                f"{workload.name}: no layer {sorted(names - found)[0]!r} (input_grad_free names a layer of "
                f"the first block, e.g. norm1, attn_qkv)"
            )
        e = DTYPE_BYTES[self.dtype]
        layers = tuple(
            without_input_gradient(lay, e) if lay.name in names else lay for lay in workload.layers
        )
        return replace(workload, layers=layers)


def parse_matmul(entry: Mapping[str, Any], where: str, hardware: str) -> MatmulSetup:
    """The setup of a ``kind: matmul`` entry."""
    return MatmulSetup(
        name_list(entry, "device", where), _dtype(entry, where), positive_ints(entry, "sizes", where)
    )


def parse_layer(entry: Mapping[str, Any], where: str, hardware: str) -> LayerSetup:
    """The setup of a ``kind: layer`` entry."""
    return LayerSetup(
        name_list(entry, "device", where),
        name_list(entry, "model", where),
        _dtype(entry, where),
        positive_ints(entry, "batches", where),
        positive_ints(entry, "seq_lens", where),
        positive_int(entry, "hidden", where),
        attention_mode(entry, where),
        input_grad_free=name_list(entry, "input_grad_free", where, required=False),
    )
