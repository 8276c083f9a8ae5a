"""Forward and backward benchmarks of each layer kind the workload presets are built from.

Each benchmark is a small torch module with analytic forward FLOPs and bytes moved, so the fit can
compare measured layer times with what the compute model predicts for the same layer. Backward is
timed alone, by re-running backward over a retained graph. ``layer_kind`` names the kind as
:mod:`simcore.workload.loader` layers carry it (linear, attention, norm, conv, embedding, activation),
or a workload kind of its own where that kind runs kernels of its own (relu, maxpool).
"""

from __future__ import annotations

import functools
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from calibrate.compute.dtypes import DTYPES

__all__ = [
    "LAYERS",
    "LayerBench",
    "LayerStep",
    "layer_benchmarks",
    "layer_steps",
    "minor_faults",
    "op_overhead_benchmarks",
]


@dataclass(frozen=True, slots=True)
class LayerBench:
    """One layer benchmark: the module, its input, and what a forward pass costs analytically."""

    name: str
    layer_kind: str
    shape: str
    module: nn.Module
    make_input: Callable[[], torch.Tensor]
    fwd_flops: float
    fwd_bytes_per_elem: float  # bytes moved in forward, in units of the dtype's element size


def _linear(b: int, s: int, d: int) -> LayerBench:
    t = b * s
    return LayerBench("linear", "linear", f"{t}x{d}->{4 * d}", nn.Linear(d, 4 * d),
                      lambda: torch.randn(t, d), 2.0 * t * d * 4 * d, t * d + 4 * d * d + 4 * t * d)  # fmt: skip


def _attention(b: int, s: int, d: int) -> LayerBench:
    # q, k, v and output projections (4 x 2Td^2) plus scores and weighted sum (2 x 2bs^2 d).
    flops = 8.0 * b * s * d * d + 4.0 * b * s * s * d
    return LayerBench("attention", "attention", f"b{b}s{s}d{d}h4", nn.MultiheadAttention(d, 4, batch_first=True),
                      lambda: torch.randn(b, s, d), flops, 4.0 * b * s * d + 4 * d * d + b * 4 * s * s)  # fmt: skip


def _layernorm(b: int, s: int, d: int) -> LayerBench:
    return LayerBench("layernorm", "norm", f"{b * s}x{d}", nn.LayerNorm(d), lambda: torch.randn(b * s, d),
                      8.0 * b * s * d, 2.0 * b * s * d)  # fmt: skip


def _gelu(b: int, s: int, d: int) -> LayerBench:
    return LayerBench("gelu", "activation", f"{b * s}x{4 * d}", nn.GELU(), lambda: torch.randn(b * s, 4 * d),
                      8.0 * b * s * 4 * d, 2.0 * b * s * 4 * d)  # fmt: skip


def _embedding(b: int, s: int, d: int) -> LayerBench:
    vocab = 1000
    return LayerBench("embedding", "embedding", f"{vocab}x{d}[{b}x{s}]", nn.Embedding(vocab, d),
                      lambda: torch.randint(0, vocab, (b, s)), 0.0, 2.0 * b * s * d)  # fmt: skip


def _conv2d(b: int, c: int, hw: int) -> LayerBench:
    flops = 2.0 * b * hw * hw * c * c * 9
    return LayerBench("conv2d", "conv", f"b{b}c{c}hw{hw}k3", nn.Conv2d(c, c, 3, padding=1),
                      lambda: torch.randn(b, c, hw, hw), flops, 2.0 * b * c * hw * hw + 9 * c * c)  # fmt: skip


def _conv2d_rgb(b: int, c: int, hw: int) -> LayerBench:
    """A stem convolution: 3 input channels (an RGB image) to ``c``, 3x3. Its im2col GEMM reduces
    over only 3 x 9 = 27 elements, which the 64-channel benchmarks (576) do not show."""
    flops = 2.0 * b * hw * hw * 3 * c * 9
    return LayerBench("conv2d_rgb", "conv", f"b{b}c3->{c}hw{hw}k3", nn.Conv2d(3, c, 3, padding=1),
                      lambda: torch.randn(b, 3, hw, hw), flops, b * (3 + c) * hw * hw + 27 * c)  # fmt: skip


def _conv2d_image(b: int, c: int, hw: int) -> LayerBench:
    bench = _conv2d(b, c, hw)
    return LayerBench("conv2d_image", bench.layer_kind, bench.shape, bench.module, bench.make_input,
                      bench.fwd_flops, bench.fwd_bytes_per_elem)  # fmt: skip


def _relu(b: int, c: int, hw: int) -> LayerBench:
    return LayerBench("relu", "relu", f"b{b}c{c}hw{hw}", nn.ReLU(), lambda: torch.randn(b, c, hw, hw),
                      float(b * c * hw * hw), 2.0 * b * c * hw * hw)  # fmt: skip


def _maxpool(b: int, c: int, hw: int) -> LayerBench:
    """2x2 max pooling, as ``calibrate.train``'s CNN runs it: on an input that requires grad, so
    torch runs ``max_pool2d_with_indices`` (it keeps the argmax for backward)."""
    return LayerBench("maxpool", "maxpool", f"b{b}c{c}hw{hw}k2", nn.MaxPool2d(2), lambda: torch.randn(b, c, hw, hw),
                      float(b * c * hw * hw), 1.25 * b * c * hw * hw)  # fmt: skip


def _batchnorm(b: int, c: int, hw: int) -> LayerBench:
    return LayerBench("batchnorm", "norm", f"b{b}c{c}hw{hw}", nn.BatchNorm2d(c), lambda: torch.randn(b, c, hw, hw),
                      8.0 * b * c * hw * hw, 2.0 * b * c * hw * hw)  # fmt: skip


# Small shapes (scaled by --layer-scale): batch 4, sequence 64, width 64; images 16 channels of 16x16.
LAYERS: dict[str, Callable[[int], LayerBench]] = {
    "linear": lambda k: _linear(4, 64, 64 * k),
    "attention": lambda k: _attention(4, 64, 64 * k),
    "layernorm": lambda k: _layernorm(4, 64, 64 * k),
    "gelu": lambda k: _gelu(4, 64, 64 * k),
    "embedding": lambda k: _embedding(4, 64, 64 * k),
    "conv2d": lambda k: _conv2d(4, 16 * k, 16),
    "batchnorm": lambda k: _batchnorm(4, 16 * k, 16),
    # calibrate.train's CNN geometry (scale 4: its batch 32, width 64, 32x32 images): layers whose
    # activations outgrow the caches the batch-4 16x16 benchmarks above fit in
    "conv2d_image": lambda k: _conv2d_image(8 * k, 16 * k, 32),
    "conv2d_rgb": lambda k: _conv2d_rgb(8 * k, 16 * k, 32),
    "relu": lambda k: _relu(8 * k, 16 * k, 32),
    "maxpool": lambda k: _maxpool(8 * k, 16 * k, 32),
}


def _forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = (
        module(x, x, x, need_weights=False)[0] if isinstance(module, nn.MultiheadAttention) else module(x)
    )
    return out


def layer_benchmarks(
    names: list[str], dtypes: list[str], device: torch.device, scale: int = 1
) -> Iterator[tuple[str, dict[str, Any], Callable[[], Any]]]:
    """``(item, row info, call)`` for the forward and the backward of each layer in each dtype."""
    for p in _prepared(names, dtypes, device, scale, {}):
        yield f"layer/{p.bench.name}/{p.dtype}/fwd", p.fwd, functools.partial(_forward, p.module, p.x)
        out = _forward(p.module, p.x)
        backward = functools.partial(out.backward, torch.ones_like(out), retain_graph=True)
        yield f"layer/{p.bench.name}/{p.dtype}/bwd", p.bwd, backward


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One layer benchmark on its device and dtype, with the rows of its forward and backward."""

    bench: Any
    dtype: str
    module: nn.Module
    x: torch.Tensor
    fwd: dict[str, Any]
    bwd: dict[str, Any]


def _prepared(
    names: list[str], dtypes: list[str], device: torch.device, scale: int, extra: dict[str, Any]
) -> Iterator[_Prepared]:
    for name in names:
        for dtype_name in dtypes:
            bench = LAYERS[name](scale)
            dtype = DTYPES[dtype_name]
            module = bench.module.to(device=device, dtype=dtype)
            x = bench.make_input().to(device)
            if x.is_floating_point():
                x = x.to(dtype).requires_grad_(True)
            elem = torch.tensor([], dtype=dtype).element_size()
            info = {"kind": "layer", "layer": bench.name, "layer_kind": bench.layer_kind, "dtype": dtype_name,
                    "shape": bench.shape, **extra}  # fmt: skip
            fwd = {**info, "phase": "fwd", "flops": bench.fwd_flops, "bytes": bench.fwd_bytes_per_elem * elem}
            bwd = {
                **info,
                "phase": "bwd",
                "flops": 2 * bench.fwd_flops,
                "bytes": 2 * bench.fwd_bytes_per_elem * elem,
            }
            yield _Prepared(bench, dtype_name, module, x, fwd, bwd)


@dataclass(frozen=True, slots=True)
class LayerStep:
    """One layer benchmark as a training step runs it: forward on a fresh graph, then backward.

    ``run(clock)`` does one iteration and returns (forward seconds, backward seconds) on ``clock``
    and the minor page faults of each (:func:`minor_faults`);
    the parameter and input gradients are dropped after it, as ``zero_grad(set_to_none=True)``
    does between steps. Unlike :func:`layer_benchmarks` (forward again and again, backward over a
    retained graph), every iteration allocates and frees the layer's activations and gradients as a
    step does, so allocator and page-fault costs land where training pays them."""

    item: str
    fwd: dict[str, Any]
    bwd: dict[str, Any]
    run: Callable[[Callable[[], float]], tuple[float, float, int, int]]


def layer_steps(
    names: list[str], dtypes: list[str], device: torch.device, scale: int = 1
) -> Iterator[LayerStep]:
    """A :class:`LayerStep` for each layer in each dtype; rows as :func:`layer_benchmarks`' with
    ``"timing": "step"``."""
    for p in _prepared(names, dtypes, device, scale, {"timing": "step"}):
        yield LayerStep(
            f"layer-step/{p.bench.name}/{p.dtype}", p.fwd, p.bwd, functools.partial(_step, p.module, p.x)
        )


def minor_faults() -> int:
    """Minor page faults of the calling thread so far (Linux ``RUSAGE_THREAD``; 0 where absent)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return 0 if who is None else int(resource.getrusage(who).ru_minflt)


def _step(module: nn.Module, x: torch.Tensor, clock: Callable[[], float]) -> tuple[float, float, int, int]:
    faults, begin = minor_faults(), clock()
    out = _forward(module, x)
    middle, faults_fwd = clock(), minor_faults()
    out.backward(torch.ones_like(out))
    end, faults_bwd = clock(), minor_faults()
    module.zero_grad(set_to_none=True)
    x.grad = None
    return middle - begin, end - middle, faults_fwd - faults, faults_bwd - faults_fwd


def _scale_chain(x: torch.Tensor, ops: int) -> torch.Tensor:
    for _ in range(ops):
        x = x * 1.0001  # one aten.mul per link; its backward node runs one aten.mul
    return x


def op_overhead_benchmarks(
    chains: list[int], device: torch.device
) -> Iterator[tuple[str, dict[str, Any], Callable[[], Any]]]:
    """``(item, row info, call)``: a chain of ``ops`` scalings of a one-element tensor that
    requires grad, forward (building the autograd graph) and backward (over the retained graph).

    The arithmetic on one element is negligible, so the time is the framework's: dispatch,
    autograd node creation (forward) or execution (backward), Python. Counted with
    ``TorchDispatchMode`` (torch 2.13): the forward runs exactly ``ops`` operators, the backward
    ``ops`` plus a constant two (the leaf's gradient accumulation). ``calibrate.fit`` takes the
    slope of time over ``ops`` per phase, which drops every fixed cost of the call.
    """
    for ops in chains:
        leaf = torch.ones(1, device=device, requires_grad=True)
        info = {"kind": "op_overhead", "dtype": "fp32", "shape": f"chain{ops}", "ops": ops}
        yield f"op_overhead/fwd/{ops}", {**info, "phase": "fwd"}, functools.partial(_scale_chain, leaf, ops)
        out = _scale_chain(leaf, ops)
        backward = functools.partial(out.backward, torch.ones_like(out), retain_graph=True)
        yield f"op_overhead/bwd/{ops}", {**info, "phase": "bwd"}, backward
