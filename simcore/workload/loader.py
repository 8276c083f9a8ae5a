"""What one training step computes: layers grouped into blocks, with parameters, FLOPs and bytes.

A :class:`Workload` is an ordered tuple of :class:`Layer` records (one record per operator: a
matmul, a norm, a convolution ...). Every per-layer figure is *per sample* (one sequence for a
language model, one image for a vision model) so a strategy scales it by its micro-batch.
Layers belong to blocks (a transformer block, a CNN residual block or stage): the natural units
for FSDP wrapping; embeddings, stems and heads sit outside blocks (``block == -1``).

:func:`load_workload` accepts a preset name (:func:`preset_names`), the path of a shape file
(YAML/JSON, see :func:`simcore.workload.shapefile.load_shape_file`), a Hugging Face ``config.json``
or a model folder holding one (see :mod:`simcore.workload.hf_config`) or ``"module:factory"`` naming
a Python callable that returns a ``torch.nn.Module`` (imported on the meta device, see
:mod:`simcore.workload.torch_import`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.hf_config import is_hf_config, load_hf_config
from simcore.workload.models import cnn, transformer
from simcore.workload.models.vit import build_vit
from simcore.workload.shapefile import load_shape_file
from simcore.workload.torch_import import workload_from_factory
from simcore.workload.types import Workload
from simcore.workload.user_code import DEFAULT_IMPORT_TIMEOUT_S
from simcore.yamlload import safe_load

__all__ = ["load_workload", "preset_names", "preset_source"]


# ---------------------------------------------------------------------------------------------------
# Presets


_PRESETS_FILE = Path(__file__).parent / "models" / "presets.yaml"


@functools.lru_cache(maxsize=1)
def _preset_table() -> Mapping[str, Mapping[str, Any]]:
    with _PRESETS_FILE.open(encoding="utf-8") as handle:
        data = safe_load(handle)
    return data["presets"]


def preset_names() -> list[str]:
    """Names of the built-in model presets, sorted."""
    return sorted(_preset_table())


def preset_source(name: str) -> str:
    """Where the preset's architecture and published parameter count come from."""
    return str(_preset_entry(name)["source"])


def _preset_entry(name: str) -> Mapping[str, Any]:
    table = _preset_table()
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TrainsimError(
            f"unknown model {name!r}{hint}; presets: {', '.join(sorted(table))}; "
            "or give a shape file (.yaml/.json), a Hugging Face config.json or model folder, "
            "or 'module:factory'"
        )
    return table[name]


@functools.lru_cache(maxsize=64)  # workloads are immutable: what-if sweeps reuse them
def _build_preset(
    name: str, seq_len: int | None, image_size: int | None, dtype: str | None, flash: bool | None = None
) -> Workload:
    entry = _preset_entry(name)
    if flash is not None and entry["family"] != "transformer":
        raise TrainsimError(
            f"model {name!r} has no attention to run fused or eager (a {entry['family']} preset)"
        )
    if entry["family"] == "transformer":
        shape = transformer.TransformerShape.from_mapping(entry["shape"], where=f"preset {name!r}")
        if flash is not None:
            shape = dataclasses.replace(shape, flash_attention=flash)
        return transformer.build_workload(
            name, shape, seq_len=seq_len, dtype=dtype or entry.get("dtype", "bf16"), source=entry["source"]
        )
    size = image_size or int(entry["image_size"])
    if entry["family"] == "vit":
        return build_vit(
            name, **dict(entry["shape"]), image_size=size, dtype=dtype or entry.get("dtype", "bf16"),
            source=entry["source"],
        )  # fmt: skip
    return cnn.build_preset(
        name,
        entry["builder"],
        dict(entry.get("args", {})),
        image_size=size,
        dtype=dtype or entry.get("dtype", "bf16"),
        source=entry["source"],
    )


# ---------------------------------------------------------------------------------------------------
# Entry point


def _check_dtype(dtype: str | None) -> None:
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise TrainsimError(f"unknown dtype {dtype!r}; allowed: {', '.join(sorted(DTYPE_BYTES))}")


def _check_positive(value: int | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise TrainsimError(f"{what} must be a positive integer, got {value!r}")


def load_workload(
    spec: str,
    *,
    seq_len: int | None = None,
    image_size: int | None = None,
    dtype: str | None = None,
    input_shape: tuple[int, ...] | None = None,
    flash_attention: bool | None = None,
    import_timeout_s: float | None = DEFAULT_IMPORT_TIMEOUT_S,
) -> Workload:
    """The workload named by ``spec``: a preset, a shape file, a Hugging Face ``config.json`` (or a
    folder holding one), or ``"module:factory"``.

    ``seq_len`` overrides a language model's sequence length, ``image_size`` a vision model's
    input resolution, ``dtype`` the activation dtype (default: the preset's, else ``bf16``).
    ``input_shape`` is the per-sample input shape for a torch module (e.g. ``(3, 224, 224)``);
    for token models give ``seq_len`` instead (the input is then a ``(1, seq_len)`` int64 tensor).
    ``flash_attention`` overrides a transformer preset's (or config.json's) attention: fused (True)
    or the eager path that materialises the scores (False); None keeps the preset's.
    ``import_timeout_s``: the time limit on a ``module:factory``'s import and trace (run in a child
    process; None runs it here, unlimited).
    """
    _check_dtype(dtype)
    _check_positive(seq_len, "seq_len")
    _check_positive(image_size, "image_size")
    path = Path(spec)
    if spec not in _preset_table() and is_hf_config(path):  # a preset's name wins over a folder's
        return load_hf_config(path, seq_len=seq_len, dtype=dtype, flash_attention=flash_attention)
    is_file = spec.endswith((".yaml", ".yml", ".json")) or path.is_file()
    if flash_attention is not None and (is_file or ":" in spec):
        raise TrainsimError(
            "flash_attention overrides a transformer preset only (a shape file states its own)"
        )
    if is_file:
        return load_shape_file(path, seq_len=seq_len, image_size=image_size, dtype=dtype)
    if ":" in spec:
        return workload_from_factory(
            spec, input_shape=input_shape, seq_len=seq_len, image_size=image_size, dtype=dtype or "bf16",
            timeout_s=import_timeout_s,
        )  # fmt: skip
    return _build_preset(spec, seq_len, image_size, dtype, flash_attention)
