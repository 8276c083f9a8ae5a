"""One traced forward pass of a torch module: per module its FLOPs, parameters, saved and output bytes.

Used by :mod:`simcore.workload.torch_import` (which turns the records into a workload); see its docstring
for what is counted. torch is passed in by the caller, never imported at module import time.

Saved tensors are counted once per storage over the whole pass (the pack hook of
``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd keeps; storages are told
apart by their ``StorageImpl``, and each counted tensor is held until the pass ends so that no
freed storage's identity is reused). ``F.scaled_dot_product_attention`` is intercepted with a
``TorchFunctionMode`` and counted as the fused kernels save, whatever path the meta device takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simcore.workload.types import Layer, ParameterTie

__all__ = ["ModuleRecord", "layer_name", "parameter_ties", "tensor_bytes", "trace"]

LOGSUMEXP_BYTES = 4  # fused attention keeps an fp32 log-sum-exp per query row and head


@dataclass
class ModuleRecord:
    """What one module did in the traced forward pass (its own work, children excluded)."""

    name: str
    leaf: bool
    order: int
    params: int = 0
    flops: float = 0.0
    saved_bytes: float = 0.0
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    owned_params: list[int] = field(default_factory=list)  # ids of the parameters counted here
    shared_params: dict[int, int] = field(default_factory=dict)  # id -> numel of others' parameters used


def tensor_bytes(torch: Any, value: Any, element_bytes: int) -> float:
    """Bytes of the tensors in ``value`` (nested tuples, lists, dicts), floats at ``element_bytes``."""
    if isinstance(value, torch.Tensor):
        size = element_bytes if value.is_floating_point() else value.element_size()
        return float(value.numel() * size)
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(torch, item, element_bytes) for item in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(torch, item, element_bytes) for item in value.values())
    return 0.0


def _storage_bytes(tensor: Any, element_bytes: int) -> float:
    storage = tensor.untyped_storage()
    if not tensor.is_floating_point():
        return float(storage.nbytes())
    return float(storage.nbytes() // tensor.element_size() * element_bytes)


class _Tracer:
    """The hooks of one traced pass and what they record."""

    def __init__(self, torch: Any, model: Any, element_bytes: int) -> None:
        self.torch, self.model, self.element_bytes = torch, model, element_bytes
        self.records: dict[str, ModuleRecord] = {}
        self.stack: list[str] = []
        self.names = {id(mod): name for name, mod in model.named_modules()}
        self.params = {id(param) for param in model.parameters()}
        self.owner: dict[int, str] = {}  # parameter id -> the module that counts it
        self.seen: set[int] = set()  # storages already counted as saved
        self.kept: list[Any] = []  # counted tensors, alive until the pass ends
        self.in_attention = 0  # > 0 inside SDPA: its math-path saves are not counted

    def pre_hook(self, mod: Any, args: Any) -> None:
        name = self.names[id(mod)]
        if name not in self.records:
            rec = ModuleRecord(name, not any(True for _ in mod.children()), len(self.records))
            for param in mod.parameters(recurse=False):
                if id(param) not in self.owner:
                    self.owner[id(param)] = name
                    rec.owned_params.append(id(param))
                    rec.params += param.numel()
                else:
                    rec.shared_params[id(param)] = param.numel()
            self.records[name] = rec
        self.records[name].input_bytes += tensor_bytes(self.torch, args, self.element_bytes)
        self.stack.append(name)

    def post_hook(self, mod: Any, args: Any, output: Any) -> None:
        self.records[self.stack.pop()].output_bytes += tensor_bytes(self.torch, output, self.element_bytes)

    def count_saved(self, tensor: Any) -> None:
        if not self.stack:
            return
        base = tensor if tensor._base is None else tensor._base
        user = self.records[self.stack[-1]]
        if id(base) in self.params:  # weights are kept anyway: not activation memory
            owner = self.owner.get(id(base))
            if owner is not None and owner != user.name:  # another module's weight: a tie
                user.shared_params[id(base)] = base.numel()
            return
        key = int(tensor.untyped_storage()._cdata)
        if key not in self.seen:
            self.seen.add(key)
            self.kept.append(tensor)
            user.saved_bytes += _storage_bytes(tensor, self.element_bytes)

    def pack(self, tensor: Any) -> Any:
        if not self.in_attention:
            self.count_saved(tensor)
        return tensor

    def attention(self, func: Any, args: Any, kwargs: Any) -> Any:
        """Run SDPA (any path) and count what the fused kernels save: q, k, v, output, log-sum-exp."""
        self.in_attention += 1
        try:
            out = func(*args, **kwargs)
            if out.dim() == 4:  # the fused kernels' layout: (batch, seq, heads, dim) in memory
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        finally:
            self.in_attention -= 1
        inputs = [*args[:3], *(kwargs[k] for k in ("query", "key", "value") if k in kwargs)]
        for tensor in (*inputs, out):
            if isinstance(tensor, self.torch.Tensor) and tensor.requires_grad:
                self.count_saved(tensor)
        query = inputs[0]
        if self.stack and query.requires_grad:
            rows = query.numel() / query.shape[-1]
            self.records[self.stack[-1]].saved_bytes += LOGSUMEXP_BYTES * rows
        return out


def _attention_mode(torch: Any, tracer: _Tracer) -> Any:
    from torch.overrides import TorchFunctionMode

    class FusedAttention(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.nn.functional.scaled_dot_product_attention:
                return tracer.attention(func, args, kwargs or {})
            return func(*args, **(kwargs or {}))

    return FusedAttention()


def trace(torch: Any, model: Any, example: Any, element_bytes: int) -> dict[str, ModuleRecord]:
    """Run ``model(example)`` once under the hooks; the records of the modules that ran, by name."""
    from torch.utils.flop_counter import FlopCounterMode

    tracer = _Tracer(torch, model, element_bytes)
    handles = [
        h
        for mod in model.modules()
        for h in (mod.register_forward_pre_hook(tracer.pre_hook), mod.register_forward_hook(tracer.post_hook))
    ]
    try:
        with (
            FlopCounterMode(display=False) as counter,
            torch.autograd.graph.saved_tensors_hooks(tracer.pack, lambda t: t),
            _attention_mode(torch, tracer),
        ):
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    records = tracer.records
    totals = {key: float(sum(ops.values())) for key, ops in counter.get_flop_counts().items()}
    prefix = type(model).__name__
    for rec in records.values():
        rec.flops = totals.get(f"{prefix}.{rec.name}" if rec.name else prefix, 0.0)
    for rec in list(records.values()):  # a module's own work: its total less its nearest called descendants'
        parent = _nearest_called_ancestor(rec.name, records)
        if parent is not None:
            records[parent].flops -= totals.get(f"{prefix}.{rec.name}", 0.0)
    return records


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
