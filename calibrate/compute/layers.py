"""Forward and backward benchmarks of each layer kind the workload presets are built from.

Each benchmark is a small torch module with analytic forward FLOPs and bytes moved, so the fit can
compare measured layer times with what the compute model predicts for the same layer. Backward is
timed alone, by re-running backward over a retained graph. ``layer_kind`` names the kind as
:mod:`simcore.workload.loader` layers carry it (linear, attention, norm, conv, embedding, activation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from calibrate.compute.dtypes import DTYPES

__all__ = ["LAYERS", "LayerBench", "layer_benchmarks", "op_overhead_benchmarks"]


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
                    "shape": bench.shape}  # fmt: skip
            fwd = {**info, "phase": "fwd", "flops": bench.fwd_flops, "bytes": bench.fwd_bytes_per_elem * elem}
            yield f"layer/{bench.name}/{dtype_name}/fwd", fwd, functools.partial(_forward, module, x)
            out = _forward(module, x)
            grad = torch.ones_like(out)
            bwd = {
                **info,
                "phase": "bwd",
                "flops": 2 * bench.fwd_flops,
                "bytes": 2 * bench.fwd_bytes_per_elem * elem,
            }
            backward = functools.partial(out.backward, grad, retain_graph=True)
            yield f"layer/{bench.name}/{dtype_name}/bwd", bwd, backward


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
