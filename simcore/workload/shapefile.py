"""Shape files: a workload described in YAML or JSON, as a transformer shape or a layer list.

:func:`load_shape_file` reads ``transformer: {...}`` (built by :mod:`simcore.workload.models.transformer`)
or ``input: [...]`` plus ``layers: [...]`` (operators ``conv``, ``linear``, ``norm``, ``act``,
``pool``, ``global_pool``, ``block`` and ``residual``, built by
:class:`simcore.workload.models.netbuilder.NetBuilder`). :func:`simcore.workload.loader.load_workload` calls it for a
``.yaml``/``.yml``/``.json`` path; it is re-exported there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError

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
    import json

    import yaml

    if not path.is_file():
        raise TrainsimError(
            f"model file {str(path)!r} does not exist (expected a preset name, a .yaml/.json "
            "shape file or 'module:factory')"
        )
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise TrainsimError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from None


def load_shape_file(
    path: Path, *, seq_len: int | None = None, image_size: int | None = None, dtype: str | None = None
) -> Workload:
    """A workload from a shape file: ``transformer: {...}`` or ``input: [...]`` plus ``layers: [...]``.

    Optional top-level keys: ``name`` (default: the file's stem), ``dtype`` (default ``bf16``) and
    ``source``. Keys and values are checked strictly; errors name the file and the key.
    """
    from simcore.workload.models import check_keys

    where = str(path)
    data = check_keys(_read_mapping(path), (), _TOP_KEYS, where)
    name = str(data.get("name", path.stem))
    chosen = dtype or data.get("dtype", "bf16")
    if chosen not in DTYPE_BYTES:
        raise TrainsimError(
            f"{where}: key 'dtype' must be one of {', '.join(sorted(DTYPE_BYTES))}; got {chosen!r}"
        )
    source = str(data.get("source", f"shape file {path.name}"))
    if ("transformer" in data) == ("layers" in data):
        raise TrainsimError(
            f"{where}: give exactly one of 'transformer' (a shape) or 'input' + 'layers' (a layer list)"
        )
    if "transformer" in data:
        if "input" in data:
            raise TrainsimError(f"{where}: key 'input' belongs to a layer list, not to a transformer")
        from simcore.workload.models import transformer

        shape = transformer.TransformerShape.from_mapping(data["transformer"], where=f"{where}: transformer")
        return transformer.build_workload(name, shape, seq_len=seq_len, dtype=chosen, source=source)
    return _layer_list_workload(data, where, name, chosen, source, image_size)


def _layer_list_workload(
    data: Mapping[str, Any], where: str, name: str, dtype: str, source: str, image_size: int | None
) -> Workload:
    from simcore.workload.models.netbuilder import NetBuilder

    shape = data.get("input")
    if (
        not isinstance(shape, list)
        or len(shape) not in (1, 3)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)
    ):
        raise TrainsimError(
            f"{where}: key 'input' must be [channels, height, width] or [features] of positive "
            f"integers, got {shape!r}"
        )
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
        if not isinstance(item, Mapping) or len(item) != 1:
            raise TrainsimError(
                f"{here}: each entry is a mapping with one operator key: {', '.join(_OP_KEYS)}"
            )
        ((op, args),) = item.items()
        if op not in _OP_KEYS:
            raise TrainsimError(f"{here}: unknown operator {op!r}; allowed: {', '.join(_OP_KEYS)}")
        if isinstance(args, str) and op in ("act", "norm"):
            args = {"kind": args}
        _add_op(net, op, args or {}, f"{here}.{op}", in_block)


def _add_op(net: Any, op: str, args: object, where: str, in_block: bool) -> None:
    from simcore.workload.models import (
        check_keys,
        get_bool,
        get_choice,
        get_nonnegative_int,
        get_positive_int,
    )

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
        net.begin_block(str(a["name"]))
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
