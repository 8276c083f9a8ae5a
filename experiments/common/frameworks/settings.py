"""What a framework config says, as what-if/plan flag values, each with the key it came from.

A reader (:mod:`.megatron`, :mod:`.torchtitan`, :mod:`.deepspeed`) turns a framework's own config
into a :class:`FrameworkConfig`: a tuple of :class:`Setting` named by the what-if's flags
(``tp``, ``global-batch``, ``recompute`` ...), the model (a preset's name, or a transformer shape
mapping when no preset has that shape) and the keys it read and ignored on purpose. Keeping the
readers on flag values, not on simcore's internals, is what lets a flag another change adds be
enabled here by name (:data:`PENDING_FLAGS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcore.errors import TrainsimError

# The preset table is read, not copied: a framework shape is matched against the presets as they are.
from simcore.workload.loader import _preset_table, preset_names

__all__ = [
    "FRAMEWORKS",
    "PENDING_FLAGS",
    "FrameworkConfig",
    "Setting",
    "config_file",
    "is_file",
    "match_preset",
    "refuse",
]

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")

# Flags a framework setting maps to that may not be in this build yet (each added by a separate
# change). A config that needs one is refused with "... needs --X, not in this build" while the
# command has no such flag; once the flag exists the setting passes through by name, no edit here.
PENDING_FLAGS = {
    "fp8": "FP8 GEMMs (Transformer Engine / torchao float8)",
    "compile": "torch.compile",
    "tp-comm-overlap": "tensor-parallel communication overlap (async TP)",
}


@dataclass(frozen=True, slots=True)
class Setting:
    """One flag value a framework config implies: ``--{flag} {value}`` (``value`` True: a switch)."""

    flag: str  # a what-if flag without its dashes, e.g. "tp", "global-batch"
    value: str | bool
    source: str  # the framework's key, e.g. "--tensor-model-parallel-size 8" or "[parallelism] ..."


@dataclass(frozen=True, slots=True)
class FrameworkConfig:
    """A framework config read: its settings as flag values, the model, and what was ignored."""

    framework: str
    settings: tuple[Setting, ...]
    shape: Mapping[str, Any] | None = None  # a transformer shape-file mapping when no preset matches
    ignored: tuple[str, ...] = field(default=())  # keys read and ignored on purpose (no effect on a step)

    def value(self, flag: str) -> str | bool | None:
        """The value of ``flag`` (None when the config does not set it)."""
        return next((s.value for s in self.settings if s.flag == flag), None)


def is_file(text: str) -> bool:
    """Whether ``text`` names an existing file (False for names no file system takes)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long, or a NUL byte
        return False


def config_file(text: str, framework: str, what: str) -> Path:
    """The path of a framework's config file; a clear line when there is none."""
    if not is_file(text):
        raise TrainsimError(f"--from {framework}: {text[:200]!r} is not a file (give the {what})")
    return Path(text)


def refuse(framework: str, key: str, why: str) -> TrainsimError:
    """The one-line error for a key a reader cannot take: which key, and what is allowed (a key
    with a line break or other unprintable characters in it is shown quoted, so the line stays one)."""
    shown = key if key.isprintable() else repr(key)
    return TrainsimError(f"--from {framework}: {shown}: {why}")


# The architecture fields that decide a step's time and memory: a framework's shape with the same
# values as a preset is that preset (dropout, the GELU variant and the position table's length are
# not compared: they do not move a step by a measurable amount).
_CORE_KEYS = ("layers", "hidden", "heads", "ffn", "vocab")
_CORE_DEFAULTS: dict[str, Any] = {
    "gated_ffn": False,
    "norm": "layernorm",
    "positions": "learned",
    "tied_embeddings": True,
    "bias": True,
    "moe": None,
}


def _core(shape: Mapping[str, Any]) -> tuple[Any, ...]:
    heads = shape["heads"]
    moe = shape.get("moe")
    moe_key = None
    if moe:
        moe_key = (moe["experts"], moe["top_k"], moe["expert_ffn"], moe.get("shared_experts", 0),
                   moe.get("dense_layers", 0))  # fmt: skip
    head_dim = shape.get("head_dim", shape["hidden"] // heads)
    rest = tuple(shape.get(k, d) for k, d in _CORE_DEFAULTS.items() if k != "moe")
    return (*(shape[k] for k in _CORE_KEYS), shape.get("kv_heads") or heads, head_dim, *rest, moe_key)


def match_preset(shape: Mapping[str, Any]) -> str | None:
    """The transformer preset with this shape's architecture, if one has it."""
    want = _core(shape)
    for name in preset_names():
        entry = _preset_table()[name]
        if entry["family"] == "transformer" and "mla" not in entry["shape"] and _core(entry["shape"]) == want:
            return name
    return None
