"""Shape files: a workload described in YAML or JSON, as a transformer shape or a layer list.

:func:`load_shape_file` reads ``transformer: {...}`` (built by :mod:`simcore.workload.models.transformer`)
or ``input: [...]`` plus ``layers: [...]`` (operators ``conv``, ``linear``, ``norm``, ``act``,
``pool``, ``global_pool``, ``block`` and ``residual``, built by
:class:`simcore.workload.models.netbuilder.NetBuilder`). :func:`simcore.workload.loader.load_workload` calls it for a
``.yaml``/``.yml``/``.json`` path; it is re-exported there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.inputs import check_nesting, load_yaml, read_text
from simcore.limits import MODEL_BLOCKS, MODEL_DIMENSION, MODEL_OPERATORS, NAME_LENGTH, TEXT_LENGTH
from simcore.workload.models import (
    check_keys,
    get_bool,
    get_choice,
    get_nonnegative_int,
    get_positive_int,
    transformer,
)
from simcore.workload.models.netbuilder import NetBuilder

if TYPE_CHECKING:
    from simcore.workload.types import Workload

__all__ = ["load_shape_file"]

_TOP_KEYS = ("name", "dtype", "source", "transformer", "input", "layers")
_OP_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # op -> (required, optional)
    "conv": (("out", "kernel"), ("stride", "padding", "groups", "bias")),
    "linear": (("out",), ("bias",)),
    "norm": ((), ("kind",)),
    "act": ((), ("kind",)),
    "pool": (("kernel",), ("stride", "padding", "kind")),
    "global_pool": ((), ()),
    "block": (("name", "layers"), ()),
    "residual": (("layers",), ()),
}
_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")


def _read_mapping(path: Path) -> Any:
    """The document in a shape file: bounded size, text only, no alias bombs, no NaN/Infinity."""
    import json

    if not path.exists():
        raise TrainsimError(
            f"model file {str(path)!r} does not exist (expected a preset name, a .yaml/.json "
            "shape file or 'module:factory')"
        )
    text = read_text(path, "a shape file (YAML or JSON)")
    if path.suffix != ".json":
        return load_yaml(text, str(path))
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise TrainsimError(f"{path}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # also our TrainsimError for NaN and Infinity
        reason = "a number has too many digits" if "digits" in str(exc) else str(exc).splitlines()[0]
        raise TrainsimError(f"{path}: not valid JSON: {reason}") from None
    return check_nesting(data, str(path))


def _no_constant(name: str) -> Any:
    raise TrainsimError(f"JSON constant {name} is not a number a shape file may hold")


def _text(data: Mapping[str, Any], key: str, where: str, default: str) -> str:
    """A free-text field (name, source): bounded text, numbers read as text."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TrainsimError(f"{where}: key {key!r} must be text, got {type(value).__name__}")
    text = str(value)
    (NAME_LENGTH if key == "name" else TEXT_LENGTH).check(len(text), f"{where}: key {key!r}")
    if key == "name" and (not text.strip() or any(c < " " for c in text)):
        raise TrainsimError(f"{where}: key 'name' must be a one-line name, got {text[:40]!r}")
    return text


def load_shape_file(
    path: Path, *, seq_len: int | None = None, image_size: int | None = None, dtype: str | None = None
) -> Workload:
    """A workload from a shape file: ``transformer: {...}`` or ``input: [...]`` plus ``layers: [...]``.

    Optional top-level keys: ``name`` (default: the file's stem), ``dtype`` (default ``bf16``) and
    ``source``. Keys and values are checked strictly; errors name the file and the key.
    """
    where = str(path)
    for value, what in ((seq_len, "seq_len"), (image_size, "image_size")):
        if value is not None:
            MODEL_DIMENSION.check_each(value, where, what)
    data = check_keys(_read_mapping(path), (), _TOP_KEYS, where)
    name = _text(data, "name", where, path.stem)
    chosen = dtype or data.get("dtype", "bf16")
    if not isinstance(chosen, str) or chosen not in DTYPE_BYTES:
        raise TrainsimError(
            f"{where}: key 'dtype' must be one of {', '.join(sorted(DTYPE_BYTES))}; got {_shown(chosen)}"
        )
    source = _text(data, "source", where, f"shape file {path.name}")
    if ("transformer" in data) == ("layers" in data):
        raise TrainsimError(
            f"{where}: give exactly one of 'transformer' (a shape) or 'input' + 'layers' (a layer list)"
        )
    if "transformer" in data:
        if "input" in data:
            raise TrainsimError(f"{where}: key 'input' belongs to a layer list, not to a transformer")
        body = data["transformer"]
        blocks = body.get("layers") if isinstance(body, Mapping) else None
        if isinstance(blocks, int) and not isinstance(blocks, bool):
            MODEL_BLOCKS.check(blocks, f"{where}: transformer", "key 'layers'")
        shape = transformer.TransformerShape.from_mapping(body, where=f"{where}: transformer")
        try:  # seq_len from the caller may not fit the model's learned positions
            workload = transformer.build_workload(name, shape, seq_len=seq_len, dtype=chosen, source=source)
        except TrainsimError as exc:
            raise TrainsimError(f"{where}: {exc}") from None
    else:
        workload = _layer_list_workload(data, where, name, chosen, source, image_size)
    return _check_finite(workload, where)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:55] + "..."


def _check_finite(workload: Workload, where: str) -> Workload:
    """Every figure of every layer is a finite number (sizes are bounded, so this is a safeguard)."""
    for layer in workload.layers:
        figures = (layer.fwd_flops, layer.bwd_flops, layer.activation_bytes, layer.output_bytes)
        if not all(math.isfinite(v) for v in (*figures, layer.memory_bytes, float(layer.params))):
            raise TrainsimError(
                f"{where}: layer {layer.name!r} has a non-finite size; the shape is too large to simulate"
            )
    return workload


def _layer_list_workload(
    data: Mapping[str, Any], where: str, name: str, dtype: str, source: str, image_size: int | None
) -> Workload:
    shape = data.get("input")
    if (
        not isinstance(shape, list)
        or len(shape) not in (1, 3)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)
    ):
        raise TrainsimError(
            f"{where}: key 'input' must be [channels, height, width] or [features] of positive "
            f"integers, got {_shown(shape)}"
        )
    for size in shape:
        MODEL_DIMENSION.check_each(size, where, "a size in key 'input'")
    if image_size is not None and len(shape) == 3:
        shape = [shape[0], image_size, image_size]
    net = NetBuilder(tuple(shape), dtype)
    try:
        _add_ops(net, data["layers"], f"{where}: layers", in_block=False)
    except TrainsimError as exc:
        raise TrainsimError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    return net.workload(name, dtype, source)


def _add_ops(net: Any, ops: object, where: str, in_block: bool) -> None:
    if not isinstance(ops, list) or not ops:
        raise TrainsimError(f"{where}: expected a non-empty list of operators ({', '.join(_OP_KEYS)})")
    for index, item in enumerate(ops):
        here = f"{where}[{index}]"
        MODEL_OPERATORS.check(len(net.layers) + 1, here, "the operators up to here")
        if not isinstance(item, Mapping) or len(item) != 1:
            raise TrainsimError(
                f"{here}: each entry is a mapping with one operator key: {', '.join(_OP_KEYS)}"
            )
        ((op, args),) = item.items()
        if not isinstance(op, str) or op not in _OP_KEYS:
            raise TrainsimError(f"{here}: unknown operator {_shown(op)}; allowed: {', '.join(_OP_KEYS)}")
        if isinstance(args, str) and op in ("act", "norm"):
            args = {"kind": args}
        _add_op(net, op, args or {}, f"{here}.{op}", in_block)


def _add_op(net: Any, op: str, args: object, where: str, in_block: bool) -> None:
    required, optional = _OP_KEYS[op]
    a = check_keys(args, required, optional, where)
    label = f"{op}{len(net.layers)}"
    if op == "conv":
        kernel = get_positive_int(a, "kernel", where)
        net.conv(
            get_positive_int(a, "out", where),
            kernel,
            get_positive_int(a, "stride", where, 1),
            get_nonnegative_int(a, "padding", where, kernel // 2),
            get_positive_int(a, "groups", where, 1),
            get_bool(a, "bias", where, False),
            name=label,
        )
    elif op == "linear":
        net.linear(get_positive_int(a, "out", where), get_bool(a, "bias", where, True), name=label)
    elif op == "norm":
        net.norm(f"{get_choice(a, 'kind', where, ('batchnorm', 'layernorm'), 'batchnorm')}{len(net.layers)}")
    elif op == "act":
        net.act(f"{get_choice(a, 'kind', where, _ACTIVATIONS, 'relu')}{len(net.layers)}")
    elif op == "pool":
        kernel = get_positive_int(a, "kernel", where)
        get_choice(a, "kind", where, ("max", "avg"), "max")
        net.pool(
            kernel,
            get_positive_int(a, "stride", where, kernel),
            get_nonnegative_int(a, "padding", where, 0),
            name=label,
        )
    elif op == "global_pool":
        net.adaptive_pool(1, name=label)
    elif op == "block":
        if in_block:
            raise TrainsimError(f"{where}: blocks cannot be nested")
        net.begin_block(_text(a, "name", where, ""))
        _add_ops(net, a["layers"], f"{where}.layers", in_block=True)
        net.end_block()
    else:  # residual
        before = (net.channels, net.height, net.width)
        _add_ops(net, a["layers"], f"{where}.layers", in_block)
        if (net.channels, net.height, net.width) != before:
            raise TrainsimError(
                f"{where}: a residual branch must keep the shape {before}, "
                f"it ends with {(net.channels, net.height, net.width)}"
            )
        net.add(name=label)
