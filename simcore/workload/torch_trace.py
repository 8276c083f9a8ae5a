"""One traced forward pass of a torch module: per module its FLOPs, parameters and bytes.

Used by :mod:`simcore.workload.torch_import` (which turns the records into a workload); see its docstring
for what is counted. torch is passed in by the caller, never imported at module import time.

Saved tensors are counted once per storage over the whole pass (the pack hook of
``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd keeps; storages are told
apart by their ``StorageImpl``, and each counted tensor is held until the pass ends so that no
freed storage's identity is reused). ``F.scaled_dot_product_attention`` is intercepted with a
``TorchFunctionMode`` and counted as the fused kernels run it, whatever path the meta device takes.
Bytes moved are counted per ATen operator with a ``TorchDispatchMode``: each operator that is not a
view reads its tensor arguments and writes its results (parameters excluded: the compute model
adds the weights itself), so an eager RMSNorm's fp32 upcast, ``pow``, ``mean`` ... are each counted.
The matmuls (``mm``, ``addmm``, ``bmm``) a module runs itself give its GEMM shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simcore.workload.torch_kinds import conv_gemm, module_kind
from simcore.workload.types import Layer, ParameterTie

__all__ = ["AttentionRecord", "ModuleRecord", "Trace", "layer_name", "parameter_ties", "trace"]

LOGSUMEXP_BYTES = 4  # fused attention keeps an fp32 log-sum-exp per query row and head
_MATMULS = ("mm", "addmm", "bmm", "baddbmm")  # ATen matmuls whose operand shapes are a GEMM's


@dataclass
class AttentionRecord:
    """The ``scaled_dot_product_attention`` calls of one module's own work, as the fused kernel runs them."""

    order: int  # the trace clock at the first call (places the layer in execution order)
    flops: float = 0.0  # FLOPs FlopCounterMode counts (every score of the matrix)
    executed_flops: float = 0.0  # what the fused kernel computes: half of them under a causal mask
    saved_bytes: float = 0.0
    moved_bytes: float = 0.0  # query, key, value read, the output written
    output_bytes: float = 0.0


@dataclass
class ModuleRecord:
    """What one module did in the traced forward pass (its own work, children excluded)."""

    name: str
    leaf: bool
    order: int  # the trace clock when its forward began
    end: int = 0  # ... and when it ended
    kind: str = "elementwise"
    params: int = 0
    flops: float = 0.0
    saved_bytes: float = 0.0
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    moved_bytes: float = 0.0  # read and written by its own (non-view) operators, weights excluded
    gemms: list[tuple[float, float, float]] = field(default_factory=list)  # (m, k, n), whole batch
    attention: AttentionRecord | None = None
    owned_params: list[int] = field(default_factory=list)  # ids of the parameters counted here
    shared_params: dict[int, int] = field(default_factory=dict)  # id -> numel of others' parameters used

    @property
    def gemm(self) -> tuple[float, float, float] | None:
        """The GEMM shape of the traced batch when the module's own work is one GEMM shape."""
        return self.gemms[0] if self.gemms and len(set(self.gemms)) == 1 else None


@dataclass
class Trace:
    """The records of one pass (by module name) and the shape of the model's output."""

    records: dict[str, ModuleRecord]
    output_shape: tuple[int, ...] | None  # of the output tensor (or its ``logits``), when floating point
    output_is_projection: bool = False  # that tensor is a matmul's result (logits, not a norm's output)


class _Sizes:
    """Bytes of traced tensors: the trace dtype at the workload's element size, other dtypes at theirs."""

    def __init__(self, torch: Any, trace_dtype: Any, element_bytes: int) -> None:
        self.torch, self.trace_dtype, self.element_bytes = torch, trace_dtype, element_bytes

    def element(self, tensor: Any) -> int:
        return self.element_bytes if tensor.dtype == self.trace_dtype else int(tensor.element_size())

    def of(self, value: Any) -> float:
        if isinstance(value, self.torch.Tensor):
            return float(value.numel() * self.element(value))
        if isinstance(value, (tuple, list)):
            return sum(self.of(item) for item in value)
        if isinstance(value, dict):
            return sum(self.of(item) for item in value.values())
        return 0.0

    def storage(self, tensor: Any) -> float:
        return float(tensor.untyped_storage().nbytes() // tensor.element_size() * self.element(tensor))


class _Tracer:
    """The hooks of one traced pass and what they record."""

    def __init__(self, torch: Any, model: Any, sizes: _Sizes, counter: Any) -> None:
        self.torch, self.model, self.sizes, self.counter = torch, model, sizes, counter
        self.records: dict[str, ModuleRecord] = {}
        self.stack: list[str] = []
        self.clock = 0  # one tick per module start, module end and attention call: execution order
        self.names = {id(mod): name for name, mod in model.named_modules()}
        self.params = {id(param) for param in model.parameters()}
        self.param_storages = {int(p.untyped_storage()._cdata) for p in model.parameters()}
        self.owner: dict[int, str] = {}  # parameter id -> the module that counts it
        self.seen: set[int] = set()  # storages already counted as saved
        self.kept: list[Any] = []  # counted tensors, alive until the pass ends
        self.in_fused = 0  # > 0 inside SDPA or dropout: the meta path's saves and operators are not counted
        self.last_matmul: int | None = None  # the storage of the latest matmul's result

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def pre_hook(self, mod: Any, args: Any) -> None:
        name = self.names[id(mod)]
        if name not in self.records:
            rec = ModuleRecord(name, not any(True for _ in mod.children()), self.tick())
            for param in mod.parameters(recurse=False):
                if id(param) not in self.owner:
                    self.owner[id(param)] = name
                    rec.owned_params.append(id(param))
                    rec.params += param.numel()
                else:
                    rec.shared_params[id(param)] = param.numel()
            self.records[name] = rec
        self.records[name].input_bytes += self.sizes.of(args)
        self.stack.append(name)

    def post_hook(self, mod: Any, args: Any, output: Any) -> None:
        rec = self.records[self.stack.pop()]
        rec.output_bytes += self.sizes.of(output)
        rec.end = self.tick()
        if isinstance(mod, self.torch.nn.modules.conv._ConvNd) and isinstance(output, self.torch.Tensor):
            rec.gemms = [conv_gemm(mod, float(output.numel()))]

    def count_saved(self, tensor: Any) -> float:
        """Count ``tensor`` as saved by the running module (once per storage); the bytes added."""
        if not self.stack:
            return 0.0
        base = tensor if tensor._base is None else tensor._base
        user = self.records[self.stack[-1]]
        if id(base) in self.params:  # weights are kept anyway: not activation memory
            owner = self.owner.get(id(base))
            if owner is not None and owner != user.name:  # another module's weight: a tie
                user.shared_params[id(base)] = base.numel()
            return 0.0
        key = int(tensor.untyped_storage()._cdata)
        if key in self.seen:
            return 0.0
        self.seen.add(key)
        self.kept.append(tensor)
        return self.sizes.storage(tensor)

    def pack(self, tensor: Any) -> Any:
        if not self.in_fused and self.stack:
            self.records[self.stack[-1]].saved_bytes += self.count_saved(tensor)
        return tensor

    def operator(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Count one ATen operator's bytes (and GEMM shape) for the running module."""
        if self.in_fused or not self.stack or func.is_view:
            return
        tensors = _flat(self.torch, (args, kwargs))
        if not func._schema.is_mutable and _aliases(tensors, _flat(self.torch, out)):
            return  # a view the schema does not declare (``_unsafe_view`` after a matmul): no copy
        rec = self.records[self.stack[-1]]
        tensors = [t for t in tensors if not self._is_weight(t)]
        rec.moved_bytes += sum(self.sizes.of(t) for t in tensors) + self.sizes.of(out)
        name = func.__name__.split(".")[0]
        if name in _MATMULS:
            self.last_matmul = int(out.untyped_storage()._cdata)
            a, b = args[-2], args[-1]
            batch = a.shape[0] if a.dim() == 3 else 1
            rec.gemms.append((float(batch * a.shape[-2]), float(a.shape[-1]), float(b.shape[-1])))

    def _is_weight(self, tensor: Any) -> bool:
        return int(tensor.untyped_storage()._cdata) in self.param_storages

    def attention(self, func: Any, args: Any, kwargs: Any) -> Any:
        """Run SDPA (any path) and count it as the fused kernels run it (FlashAttention-2, Dao 2023):
        FLOPs executed (half the scores under a causal mask), q, k, v read and the output written,
        q, k, v, the output and an fp32 log-sum-exp per query row saved."""
        before = self.counter.get_total_flops()
        self.in_fused += 1
        try:
            out = func(*args, **kwargs)
            if out.dim() == 4:  # the fused kernels' layout: (batch, seq, heads, dim) in memory
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        finally:
            self.in_fused -= 1
        if not self.stack:
            return out
        rec = self.records[self.stack[-1]]
        if rec.attention is None:
            rec.attention = AttentionRecord(self.tick())
        att = rec.attention
        flops = float(self.counter.get_total_flops() - before)
        causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
        att.flops += flops
        att.executed_flops += flops * (0.5 if causal else 1.0)
        inputs = [*args[:3], *(kwargs[k] for k in ("query", "key", "value") if k in kwargs)]
        att.moved_bytes += self.sizes.of(inputs) + self.sizes.of(out)
        att.output_bytes += self.sizes.of(out)
        for tensor in (*inputs, out):
            if isinstance(tensor, self.torch.Tensor) and tensor.requires_grad:
                att.saved_bytes += self.count_saved(tensor)
        query = inputs[0]
        if query.requires_grad:
            att.saved_bytes += LOGSUMEXP_BYTES * query.numel() / query.shape[-1]
        return out

    def dropout(self, func: Any, args: Any, kwargs: Any) -> Any:
        """Run dropout and count it as CUDA's fused ``native_dropout`` kernel: the input read, the
        output and a 1-byte mask written, the mask saved (the meta device runs ``bernoulli_``,
        ``div_`` and ``mul`` and saves a mask of the input's dtype instead)."""
        names = ("input", "p", "training", "inplace")
        bound = {**dict(zip(names, args, strict=False)), **kwargs}
        self.in_fused += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.in_fused -= 1
        x = bound.get("input")
        active = bound.get("training", True) and bound.get("p", 0.5) > 0
        if self.stack and active and isinstance(x, self.torch.Tensor):
            rec = self.records[self.stack[-1]]
            rec.moved_bytes += self.sizes.of(x) + self.sizes.of(out) + x.numel()
            if x.requires_grad:
                rec.saved_bytes += float(x.numel())
        return out


def _flat(torch: Any, value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flat(torch, item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _flat(torch, item)]
    return []


_MHA_ARGS = (
    "query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
    "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
    "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal",
)  # fmt: skip
# arguments under which nn.MultiheadAttention is its projections around one SDPA call
_MHA_PLAIN = {"bias_k": None, "bias_v": None, "add_zero_attn": False, "key_padding_mask": None,
              "need_weights": False, "use_separate_proj_weight": False, "static_k": None, "static_v": None}  # fmt: skip
_MHA_DEFAULTS = {"need_weights": True, "use_separate_proj_weight": False}  # the signature's, where not None


def _plain_mha(torch: Any, args: Any, kwargs: Any) -> Any:
    """``F.multi_head_attention_forward`` without its extras (no attention weights returned, one packed
    projection, no key padding): the same linears and SDPA call it makes, so that they are seen
    (a torch function's own calls are hidden from the mode that handles it); None otherwise."""
    bound = {**dict(zip(_MHA_ARGS, args, strict=False)), **kwargs}
    if any(bound.get(key, _MHA_DEFAULTS.get(key)) is not plain for key, plain in _MHA_PLAIN.items()):
        return None
    query, key, value = bound["query"], bound["key"], bound["value"]
    if query.dim() != 3 or (bound.get("attn_mask") is not None and bound["attn_mask"].dim() != 2):
        return None
    F = torch.nn.functional
    tgt, batch, width = query.shape
    heads = bound["num_heads"]
    weight, bias = bound["in_proj_weight"], bound["in_proj_bias"]
    if query is key is value:
        q, k, v = F.linear(query, weight, bias).chunk(3, dim=-1)
    else:
        biases = (None, None, None) if bias is None else bias.chunk(3)
        q, k, v = (
            F.linear(x, w, b) for x, w, b in zip((query, key, value), weight.chunk(3), biases, strict=True)
        )
    q, k, v = (t.reshape(t.shape[0], batch * heads, -1).transpose(0, 1).reshape(batch, heads, t.shape[0], -1)
               for t in (q, k, v))  # fmt: skip
    dropout = bound["dropout_p"] if bound.get("training", True) else 0.0
    out = F.scaled_dot_product_attention(
        q, k, v, bound.get("attn_mask"), dropout, bound.get("is_causal", False)
    )
    out = out.permute(2, 0, 1, 3).reshape(tgt * batch, width)
    out = F.linear(out, bound["out_proj_weight"], bound["out_proj_bias"])
    return out.view(tgt, batch, width), None


def _aliases(inputs: list[Any], outputs: list[Any]) -> bool:
    """Whether some output shares its storage with an input."""
    storages = {int(t.untyped_storage()._cdata) for t in inputs}
    return any(int(t.untyped_storage()._cdata) in storages for t in outputs)


def _modes(torch: Any, tracer: _Tracer) -> tuple[Any, Any]:
    """The function mode that intercepts SDPA and dropout, and the dispatch mode that counts operators."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class FusedKernels(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.nn.functional.scaled_dot_product_attention:
                return tracer.attention(func, args, kwargs or {})
            if func is torch.nn.functional.dropout:
                return tracer.dropout(func, args, kwargs or {})
            if func is torch.nn.functional.multi_head_attention_forward:
                with self:  # see the linears and the SDPA call inside
                    plain = _plain_mha(torch, args, kwargs or {})
                if plain is not None:
                    return plain
            return func(*args, **(kwargs or {}))

    class OperatorBytes(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            tracer.operator(func, args, kwargs or {}, out)
            return out

    return FusedKernels(), OperatorBytes()


def _output_tensor(torch: Any, output: Any) -> Any:
    """The model's floating-point output tensor (or its ``logits``, as Hugging Face returns them)."""
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)) and output:
        logits = output[0]
    tensor = logits if logits is not None else output
    return tensor if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() else None


def trace(torch: Any, model: Any, example: Any, element_bytes: int, trace_dtype: Any) -> Trace:
    """Run ``model(example)`` once under the hooks (floats in ``trace_dtype``, counted at
    ``element_bytes`` each); the records of the modules that ran, by name, and the output's shape."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    tracer = _Tracer(torch, model, _Sizes(torch, trace_dtype, element_bytes), counter)
    handles = [
        h
        for mod in model.modules()
        for h in (mod.register_forward_pre_hook(tracer.pre_hook), mod.register_forward_hook(tracer.post_hook))
    ]
    attention_mode, operator_mode = _modes(torch, tracer)
    try:
        with (
            counter,
            operator_mode,
            torch.autograd.graph.saved_tensors_hooks(tracer.pack, lambda t: t),
            attention_mode,
        ):
            output = model(example)
    finally:
        for handle in handles:
            handle.remove()
    _own_flops(type(model).__name__, tracer.records, counter)
    _adopt_unrun_parameters(model, tracer)
    for name, mod in model.named_modules():
        rec = tracer.records.get(name)
        if rec is not None:
            rec.kind = module_kind(torch, mod, rec.leaf, rec.flops)
    tensor = _output_tensor(torch, output)
    if tensor is None:
        return Trace(tracer.records, None)
    projected = int(tensor.untyped_storage()._cdata) == tracer.last_matmul
    return Trace(tracer.records, tuple(int(size) for size in tensor.shape), projected)


def _own_flops(prefix: str, records: dict[str, ModuleRecord], counter: Any) -> None:
    """Each module's own FLOPs: its total less its nearest called descendants' (and its attention's)."""
    totals = {key: float(sum(ops.values())) for key, ops in counter.get_flop_counts().items()}
    for rec in records.values():
        rec.flops = totals.get(f"{prefix}.{rec.name}" if rec.name else prefix, 0.0)
    for rec in list(records.values()):
        parent = _nearest_called_ancestor(rec.name, records)
        if parent is not None:
            records[parent].flops -= totals.get(f"{prefix}.{rec.name}", 0.0)
    for rec in records.values():
        if rec.attention is not None:
            rec.flops = max(0.0, rec.flops - rec.attention.flops)


def _adopt_unrun_parameters(model: Any, tracer: _Tracer) -> None:
    """Parameters of modules whose forward never ran but whose ancestor did belong to that ancestor
    (``nn.MultiheadAttention`` applies its ``out_proj``'s weight itself)."""
    for name, mod in model.named_modules():
        if name in tracer.records:
            continue
        owner = _nearest_called_ancestor(name, tracer.records)
        if owner is None:
            continue
        rec = tracer.records[owner]
        for param in mod.parameters(recurse=False):
            if id(param) not in tracer.owner:
                tracer.owner[id(param)] = owner
                rec.owned_params.append(id(param))
                rec.params += param.numel()


def _nearest_called_ancestor(name: str, records: dict[str, ModuleRecord]) -> str | None:
    """The closest enclosing module that ran (a ModuleList never runs itself); None for the root."""
    if not name:
        return None
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in records:
            return candidate
    return "" if "" in records else None


def layer_name(rec: ModuleRecord) -> str:
    """The workload layer a module's own work becomes: its name, or ``"<name>.(self)"`` for a container."""
    if rec.leaf:
        return rec.name
    return f"{rec.name}.(self)" if rec.name else "(self)"


def parameter_ties(records: dict[str, ModuleRecord], layers: tuple[Layer, ...]) -> tuple[ParameterTie, ...]:
    """Parameters used by layers other than the one that owns them (owners in forward order)."""
    index = {layer.name: i for i, layer in enumerate(layers)}
    ordered = sorted(records.values(), key=lambda r: r.order)
    ties = []
    for owner in ordered:
        for param_id in owner.owned_params:
            users = [r for r in ordered if param_id in r.shared_params and r is not owner]
            if not users:
                continue
            uses = [index[n] for n in dict.fromkeys(map(layer_name, [owner, *users])) if n in index]
            if len(uses) >= 2:
                ties.append(ParameterTie(users[0].shared_params[param_id], tuple(uses)))
    return tuple(ties)
