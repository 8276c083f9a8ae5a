"""The torch computations the suite times, one per kernel item (:class:`~calibrate.gpu_suite.plan.KernelItem`).

Each builds its inputs from the simulator layer it is compared with (the preset's shapes at the
item's batch and sequence) and returns a zero-argument call: the forward, or forward and backward
(the backward time is their difference: :func:`calibrate.gpu_suite.run.measure_kernel`). The
memory-bound kinds run the eager code the frameworks run (Hugging Face's LlamaRMSNorm, rotary
``rotate_half``, SwiGLU, GPT-2's tanh GELU, cross entropy on fp32 logits); ``compiled`` wraps the
same function in :func:`torch.compile`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from calibrate.gpu_suite.plan import KernelItem
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload

__all__ = ["FP8_CAPABILITY", "kernel_calls", "supports_fp8"]

FP8_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada (sm_89) and Hopper (sm_90) onwards
_BF16 = torch.bfloat16


def supports_fp8(device: torch.device) -> bool:
    """Whether ``torch._scaled_mm`` has FP8 tensor cores to run on here."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= FP8_CAPABILITY


def _dims(item: KernelItem) -> Any:
    workload = load_workload(item.preset, seq_len=item.seq_len, dtype="bf16")
    layer = next((layer for layer in workload.layers if layer.name == item.layer), None)
    if layer is None or workload.dims is None:
        raise TrainsimError(f"{item.preset} has no layer {item.layer!r} with a transformer shape")
    return workload.dims, layer


def _gemm(item: KernelItem, device: torch.device) -> Callable[[], Any]:
    _, layer = _dims(item)
    m, k, n = (int(x) for x in layer.gemm)
    rows = m * item.batch
    if item.dtype == "fp8":
        a = torch.randn(rows, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=_BF16)
    a = torch.randn(rows, k, device=device, dtype=_BF16)
    b = torch.randn(k, n, device=device, dtype=_BF16)
    return lambda: torch.mm(a, b)


def _head(dims: Any) -> int:
    return int(dims.head_width or dims.hidden // dims.heads)


def _attention(item: KernelItem, device: torch.device) -> tuple[tuple[torch.Tensor, ...], Callable[..., Any]]:
    dims, _ = _dims(item)
    shape = (item.batch, dims.heads, item.seq_len, _head(dims))
    q, k, v = (torch.randn(shape, device=device, dtype=_BF16, requires_grad=True) for _ in range(3))
    # the presets measured are decoders: causal attention, as their fused kernel is priced
    return (q, k, v), lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # transformers' LlamaRMSNorm.forward
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    return weight * (hidden * torch.rsqrt(variance + 1e-6)).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # transformers' apply_rotary_pos_emb; the two outputs summed so one tensor carries both gradients
    return (q * cos + _rotate_half(q) * sin) + (k * cos + _rotate_half(k) * sin)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    # transformers' NewGELUActivation (GPT-2's gelu_new), eager
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _inputs(kind: str, dims: Any, tokens: tuple[int, int], device: torch.device) -> tuple[torch.Tensor, ...]:
    b, s = tokens

    def t(*shape: int, grad: bool = True, dtype: torch.dtype = _BF16) -> torch.Tensor:
        return torch.randn(shape, device=device, dtype=dtype, requires_grad=grad)

    head = _head(dims)
    table: dict[str, Callable[[], tuple[torch.Tensor, ...]]] = {
        "rmsnorm": lambda: (t(b, s, dims.hidden), t(dims.hidden)),
        "rotary": lambda: (
            t(b, dims.heads, s, head),
            t(b, dims.heads, s, head),
            t(s, head, grad=False),
            t(s, head, grad=False),
        ),
        "swiglu": lambda: (t(b, s, dims.ffn), t(b, s, dims.ffn)),
        "residual_add": lambda: (t(b, s, dims.hidden), t(b, s, dims.hidden)),
        "cross_entropy": lambda: (t(b * s, dims.vocab), torch.randint(dims.vocab, (b * s,), device=device)),
        "layernorm": lambda: (t(b, s, dims.hidden), t(dims.hidden), t(dims.hidden)),
        "gelu": lambda: (t(b, s, dims.ffn),),
        "dropout": lambda: (t(b, s, dims.hidden),),
    }
    return table[kind]()


_MEMORY_FNS: dict[str, Callable[..., torch.Tensor]] = {
    "rmsnorm": _rms_norm,
    "rotary": _rotary,
    "swiglu": lambda gate, up: F.silu(gate) * up,
    "residual_add": lambda a, b: a + b,
    "cross_entropy": lambda logits, target: F.cross_entropy(logits.float(), target),
    "layernorm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
    "gelu": _gelu_tanh,
    "dropout": lambda x: F.dropout(x, 0.1, training=True),
}


def _with_backward(fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]) -> Callable[[], Any]:
    def step() -> None:
        out = fn(*inputs)
        out.backward(torch.ones_like(out))

    return step


def kernel_calls(
    item: KernelItem, device: torch.device, compile_backend: str
) -> tuple[Callable[[], Any], ...]:
    """The calls to time: ``item``'s forward, and (not for a GEMM) its forward and backward, both
    from one function (compiled once for the ``compiled`` variant)."""
    if item.kind == "gemm":
        return (_gemm(item, device),)
    if item.kind == "attention":
        inputs, fn = _attention(item, device)
    else:
        dims, _ = _dims(item)
        inputs, fn = _inputs(item.name, dims, (item.batch, item.seq_len), device), _MEMORY_FNS[item.name]
    if item.variant == "compiled":
        fn = torch.compile(fn, backend=compile_backend, dynamic=False)
    return (lambda: fn(*inputs)), _with_backward(fn, inputs)
