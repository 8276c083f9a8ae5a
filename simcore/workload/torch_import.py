"""Import any ``torch.nn.Module`` as a workload, on the meta device (no weights, no GPU).

``load_workload("package.module:factory", input_shape=(3, 224, 224))`` (or a file path,
``"my_model.py:build"``) calls ``factory()`` under ``torch.device("meta")``, casts it to the
workload's dtype, runs one forward pass on a meta batch and records per module, in execution order:

- its layer kind (:mod:`simcore.workload.torch_kinds`), the kinds the preset builders emit, so the
  roofline prices each as they do: ``nn.Linear`` (and any other module whose own work is matmuls)
  a ``linear`` GEMM with its shape per sample ``(tokens, in, out)``, convolutions ``conv`` /
  ``conv1x1`` / ``conv_grouped`` with their implicit GEMM, embeddings, norms (``rmsnorm`` for
  RMSNorms), activations, dropout and pools memory-bound;
- FLOPs from ``torch.utils.flop_counter.FlopCounterMode`` (it works on meta tensors: shapes
  suffice); backward is taken as twice forward, as for the formula presets;
- parameters owned by the module (tied parameters counted once, at their first owner; those of a
  submodule that never runs, as ``nn.MultiheadAttention``'s ``out_proj``, at the ancestor using
  them); a parameter that another module also holds, or saves for backward (GPT-2's output head
  using the token embedding), becomes a :class:`~simcore.workload.types.ParameterTie`;
- bytes saved for backward, from ``torch.autograd.graph.saved_tensors_hooks``: each storage
  counted once over the whole forward pass (a ReLU output that the next convolution also saves
  is one tensor in memory), attributed to the innermost module running when it was first saved
  (the last of its users in backward, so it is freed when that module's backward ends);
- bytes moved: what each of its ATen operators reads and writes (views and weights excluded), so
  an eager RMSNorm's fp32 upcast, ``pow``, ``mean`` ... count as they run;
- ``F.scaled_dot_product_attention`` becomes an ``attention`` layer ``"<module>.(attention)"``
  priced as the fused (flash / memory-efficient) kernel real runs take: FLOPs executed (half the
  scores under ``is_causal``, backward 2.5x forward, as the presets), q, k, v read and the output
  written; it saves query, key, value, the output and an fp32 log-sum-exp per query row, its output
  laid out ``(batch, seq, heads, dim)`` as theirs is (so merging the heads afterwards is a view).
  On meta tensors torch falls back to the unfused math path, whose ``seq x seq`` scores no real run
  keeps. ``nn.MultiheadAttention`` (``need_weights=False``) is traced as its projections around
  that call. Dropout is counted as CUDA's fused kernel (a 1-byte mask), not the meta device's
  ``bernoulli_`` path.

Leaf modules become layers. Other work a container does itself (residual adds, rotary embeddings,
a head applied with ``F.linear``) becomes one layer ``"<module>.(self)"`` after its children.
Blocks are the elements of the outermost ``nn.ModuleList``s (where models keep their repeated
blocks, e.g. ``h.0``, ``layers.3``, numbered 0, 1, ... as the presets number theirs), else the
root's direct children. The example input: ``input_shape`` (per sample, float), else ``seq_len``
(a ``(batch, seq_len)`` int64 token tensor), else ``image_size`` (``3 x s x s``). Floating-point
tensors of the traced dtype are sized at the workload dtype. A token model whose output (or its
``logits``) is a projection's ``(batch, seq_len, vocab)`` result gets the presets' cross-entropy
``loss`` layer (fp32 log-probabilities saved); an encoder ending in a norm gets none. The pass itself is :func:`simcore.workload.torch_trace.trace`. torch is
imported only inside functions, so the rest of trainsim works without it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.models.transformer import LOSS_BYTES_PER_LOGIT
from simcore.workload.torch_trace import ModuleRecord, layer_name, parameter_ties, trace
from simcore.workload.types import Layer, Workload
from simcore.workload.user_code import DEFAULT_IMPORT_TIMEOUT_S, run_isolated

__all__ = ["resolve_factory", "workload_from_factory"]

_TRACE_BATCH = 2  # batch of the traced pass (BatchNorm refuses one value per channel); figures / 2
# The torch dtype the module is traced in, by workload dtype: code that upcasts (an RMSNorm's fp32
# statistics) runs as it would; fp8 training keeps bf16 activations around its fp8 GEMMs.
_TRACE_DTYPES: dict[str, Callable[[Any], Any]] = {
    "fp32": lambda torch: torch.float32,
    "tf32": lambda torch: torch.float32,
    "bf16": lambda torch: torch.bfloat16,
    "fp16": lambda torch: torch.float16,
    "fp8": lambda torch: torch.bfloat16,
}


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TrainsimError(
            "importing a torch model needs torch: pip install 'trainsim[calibrate]'"
        ) from None
    return torch


def resolve_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``"package.module:factory"`` or ``"path/to/file.py:factory"``."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise TrainsimError(f"model {spec!r}: expected 'package.module:factory' or 'file.py:factory'")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise TrainsimError(f"model {spec!r}: no such file {module_name!r}")
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            if loader_spec is None or loader_spec.loader is None:
                raise TrainsimError(f"model {spec!r}: cannot import {module_name!r}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TrainsimError(f"model {spec!r}: cannot import {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise TrainsimError(f"model {spec!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TrainsimError(f"model {spec!r}: {attr!r} is not callable")
    return target


def _example_input(
    torch: Any, spec: str, input_shape: tuple[int, ...] | None, seq_len: int | None, image_size: int | None
) -> tuple[Any, int]:
    """The meta input batch and the tokens per sample it implies."""
    if input_shape is not None:
        if not input_shape or any(not isinstance(v, int) or v <= 0 for v in input_shape):
            raise TrainsimError(f"model {spec!r}: input_shape must be positive integers, got {input_shape!r}")
        return torch.empty((_TRACE_BATCH, *input_shape), device="meta"), 0
    if seq_len is not None:
        return torch.zeros((_TRACE_BATCH, seq_len), dtype=torch.long, device="meta"), seq_len
    if image_size is not None:
        return torch.empty((_TRACE_BATCH, 3, image_size, image_size), device="meta"), 0
    raise TrainsimError(
        f"model {spec!r}: give the per-sample input: input_shape (e.g. 3,224,224) "
        "or seq_len for a token model"
    )


def _block_roots(torch: Any, model: Any) -> list[str]:
    """Names of the modules that are blocks, outermost first: every element of an ``nn.ModuleList``,
    and the elements of an ``nn.Sequential`` of a container class it repeats (a ResNet stage's
    bottlenecks, not its stem's convolution); a model with neither keeps its root's children."""
    roots: list[str] = []
    for name, mod in model.named_modules():
        if any(name == root or name.startswith(root + ".") for root in roots):
            continue  # inside a block already
        children = list(mod.named_children())
        if isinstance(mod, torch.nn.ModuleList):
            chosen = [child for child, _ in children]
        elif isinstance(mod, torch.nn.Sequential):
            kinds = Counter(type(sub) for _, sub in children if any(True for _ in sub.children()))
            chosen = [child for child, sub in children if kinds[type(sub)] >= 2]
        else:
            continue
        roots += [f"{name}.{child}" if name else child for child in chosen]
    return roots or [name for name, _ in model.named_children()]


def _block_of(name: str, block_roots: list[str]) -> str | None:
    return next((b for b in block_roots if name == b or name.startswith(b + ".")), None)


def _record_layers(rec: ModuleRecord) -> list[tuple[int, Layer]]:
    """The layers of one module's own work per traced batch, each with its place in execution order:
    a leaf at its start, a container's attention at its call and the rest of its work at its end."""
    out: list[tuple[int, Layer]] = []
    att = rec.attention
    if att is not None:
        label = f"{rec.name}.(attention)" if rec.name else "(attention)"
        fwd = att.executed_flops
        out.append((att.order, Layer(label, "attention", 0, 0, fwd, 2.5 * fwd, att.saved_bytes,
                                     att.output_bytes, att.moved_bytes)))  # fmt: skip
    saved = rec.saved_bytes
    if rec.leaf or rec.flops or rec.params or saved or rec.moved_bytes:
        output = rec.output_bytes if rec.leaf else 0.0
        bwd = 2.0 * rec.flops  # input and weight gradients, each a forward-sized matmul
        layer = Layer(layer_name(rec), rec.kind, 0, rec.params, rec.flops, bwd, saved, output,
                      rec.moved_bytes, rec.gemm)  # fmt: skip
        out.append((rec.order if rec.leaf else rec.end, layer))
    return out


def _per_sample(layer: Layer, block: int) -> Layer:
    per = 1.0 / _TRACE_BATCH
    gemm = None if layer.gemm is None else (layer.gemm[0] * per, layer.gemm[1], layer.gemm[2])
    return replace(
        layer,
        block=block,
        fwd_flops=layer.fwd_flops * per,
        bwd_flops=layer.bwd_flops * per,
        activation_bytes=layer.activation_bytes * per,
        output_bytes=layer.output_bytes * per,
        memory_bytes=layer.memory_bytes * per,
        gemm=gemm,
    )


def _layers(
    records: dict[str, ModuleRecord], block_roots: list[str]
) -> tuple[tuple[Layer, ...], tuple[str, ...]]:
    placed = sorted(
        ((order, rec.name, layer) for rec in records.values() for order, layer in _record_layers(rec)),
        key=lambda item: item[0],
    )
    block_of: dict[str, int] = {}
    block_names: list[str] = []
    layers: list[Layer] = []
    for _, name, layer in placed:
        root = _block_of(name, block_roots)
        if root is not None and root not in block_of:
            block_of[root] = len(block_names)
            block_names.append(root)
        layers.append(_per_sample(layer, -1 if root is None else block_of[root]))
    return _contiguous(layers), tuple(block_names)


def _loss_layer(output_shape: tuple[int, ...] | None, tokens: int, e: int) -> tuple[Layer, ...]:
    """The cross entropy over a token model's ``(batch, seq, vocab)`` logits, as the presets count it
    (:func:`simcore.workload.models.transformer.build_layers`): upcast to fp32 and log-softmax
    (``12 + e`` bytes per logit moved), its fp32 log-probabilities saved for backward."""
    if not tokens or output_shape is None or len(output_shape) != 3 or output_shape[1] != tokens:
        return ()
    logits = float(tokens * output_shape[2])
    saved = LOSS_BYTES_PER_LOGIT * logits
    return (Layer("loss", "loss", -1, 0, 0.0, 0.0, saved, 4.0, (12.0 + e) * logits),)


def _contiguous(layers: list[Layer]) -> tuple[Layer, ...]:
    """Keep a block's layers contiguous: a block re-entered later (a shared module) counts as outside."""
    finished: set[int] = set()
    current = -1
    out = []
    for layer in layers:
        block = layer.block
        if block != current:
            finished.add(current)
            if block in finished:
                block = -1
            current = block
        out.append(layer if block == layer.block else replace(layer, block=-1))
    return tuple(out)


def workload_from_factory(
    spec: str,
    *,
    input_shape: tuple[int, ...] | None = None,
    seq_len: int | None = None,
    image_size: int | None = None,
    dtype: str = "bf16",
    timeout_s: float | None = DEFAULT_IMPORT_TIMEOUT_S,
) -> Workload:
    """Trace the module ``factory()`` returns on the meta device into a workload (see module docstring).

    The import, the factory and the trace run the user's code: in a forked child within
    ``timeout_s`` seconds (None: in this process), any exception, exit or overrun reported as one
    line (:func:`simcore.workload.user_code.run_isolated`)."""
    torch = _import_torch()  # here, so a missing torch is this process's error and the child forks with it
    return run_isolated(
        f"model {spec!r}",
        lambda: _trace_factory(torch, spec, input_shape, seq_len, image_size, dtype),
        timeout_s,
    )


def _trace_factory(
    torch: Any,
    spec: str,
    input_shape: tuple[int, ...] | None,
    seq_len: int | None,
    image_size: int | None,
    dtype: str,
) -> Workload:
    factory = resolve_factory(spec)
    with torch.device("meta"):
        model = factory()
    if not isinstance(model, torch.nn.Module):
        raise TrainsimError(
            f"model {spec!r}: the factory returned {type(model).__name__}, not a torch.nn.Module"
        )
    trace_dtype = _TRACE_DTYPES[dtype](torch)
    model.to(trace_dtype).train()
    example, tokens = _example_input(torch, spec, input_shape, seq_len, image_size)
    if example.is_floating_point():
        example = example.to(trace_dtype)
    try:
        traced = trace(torch, model, example, DTYPE_BYTES[dtype], trace_dtype)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
        raise TrainsimError(
            f"model {spec!r}: its forward pass failed on meta tensors of shape {tuple(example.shape)}: {exc}"
        ) from None
    records = traced.records
    layers, block_names = _layers(records, _block_roots(torch, model))
    if traced.output_is_projection:
        layers += _loss_layer(traced.output_shape, tokens, DTYPE_BYTES[dtype])
    unowned = sum(p.numel() for p in model.parameters()) - sum(layer.params for layer in layers)
    if unowned:  # parameters of modules the forward pass never called: keep the count honest
        layers += (Layer("(unused parameters)", "unused", -1, unowned, 0.0, 0.0, 0.0, 0.0, 0.0),)
    return Workload(
        name=spec,
        layers=layers,
        block_names=block_names,
        dtype=dtype,
        tokens_per_sample=tokens,
        source=f"torch module {spec} traced on the meta device",
        ties=parameter_ties(records, layers),
    )
