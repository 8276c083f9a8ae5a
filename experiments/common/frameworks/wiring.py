"""``--from FRAMEWORK CONFIG`` and ``--emit FRAMEWORK`` on the what-if and the plan.

:func:`expand_from` reads the framework config and puts its settings before the command's own
arguments as flags (``--tp 8 --global-batch 1024 ...``), so argparse checks them as it checks any
flag and a flag given on the command line, coming later, wins; :class:`FromRecord` says where each
setting came from and which were overridden, for the output's config section. A setting whose flag
this command does not have is refused when the flag is one still to come (:data:`PENDING_FLAGS`)
and named on stderr when it is one this command does not take (e.g. the plan searches precision).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.common.frameworks.deepspeed import read_deepspeed
from experiments.common.frameworks.flags import add_from
from experiments.common.frameworks.megatron import read_megatron
from experiments.common.frameworks.settings import FRAMEWORKS, PENDING_FLAGS, FrameworkConfig, Setting
from experiments.common.frameworks.torchtitan import read_torchtitan
from experiments.common.progress import warn
from simcore.errors import TrainsimError
from simcore.parallel.options import parse_recompute
from simcore.workload.models import transformer
from simcore.workload.types import Workload

__all__ = ["FromRecord", "add_from", "expand_from", "framework_workload"]

# The plan's flag for a what-if flag where the names differ: (flag, value for a switch).
PLAN_FLAGS: dict[str, tuple[str, str | None]] = {
    "micro-batch": ("micro-batches", None),
    "schedule": ("schedules", None),
    "sequence-parallel": ("sequence-parallel", "on"),
}


@dataclass(frozen=True, slots=True)
class FromRecord:
    """The framework config a command ran from: each setting, its source, whether a flag overrode it."""

    framework: str
    config: str
    settings: tuple[Setting, ...]
    overridden: frozenset[str]
    unused: tuple[str, ...]  # flags this command does not take
    ignored: tuple[str, ...]
    shape: Mapping[str, Any] | None

    def record(self) -> dict[str, Any]:
        """The JSON ``from`` section."""
        return {
            "framework": self.framework,
            "config": self.config,
            "settings": [
                {
                    "flag": f"--{s.flag}",
                    "value": s.value,
                    "source": s.source,
                    "overridden": s.flag in self.overridden,
                    "used": s.flag not in self.unused,
                }
                for s in self.settings
            ],
            "ignored": list(self.ignored),
        }

    def describe(self) -> str:
        """One line for a table's header."""
        parts = [
            f"--{s.flag}"
            + ("" if s.value is True else f" {s.value}")
            + (" (overridden)" if s.flag in self.overridden else "")
            for s in self.settings
            if s.flag not in self.unused
        ]
        text = f"from {self.framework}: {' '.join(parts)}"
        return text + (f"; ignored on purpose: {', '.join(self.ignored)}" if self.ignored else "")


def _explicit(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The flags given in ``argv`` (every default suppressed)."""
    quiet = copy.deepcopy(parser)
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    try:
        namespace, _ = quiet.parse_known_args(list(argv))
    except SystemExit:  # the real parse reports it
        return argparse.Namespace()
    return namespace


def _gpus_hint(explicit: argparse.Namespace) -> int | None:
    gpus = getattr(explicit, "gpus", None)
    if isinstance(gpus, list) and len(gpus) == 1:
        return int(gpus[0])
    if isinstance(gpus, str) and gpus.strip().isdigit():
        return int(gpus)
    return None


# Each reader with (config, the command's single --gpus or None, the command's --model or None).
READERS: dict[str, Callable[[str, int | None, str | None], FrameworkConfig]] = {
    "megatron": lambda text, gpus, model: read_megatron(text),
    "torchtitan": lambda path, gpus, model: read_torchtitan(
        path, gpus=gpus, model_given=model is not None, model_name=model
    ),
    "deepspeed": lambda path, gpus, model: read_deepspeed(path, gpus=gpus),
}


def _spelled_in_full(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with an abbreviation of ``--from`` that ``parser`` would take (``--fro``) written in
    full, so that it is expanded rather than parsed and ignored."""
    options = parser._option_string_actions

    def full(token: str) -> str:
        prefix = token.startswith("--") and token != "--from" and "--from".startswith(token)
        return "--from" if prefix and [o for o in options if o.startswith(token)] == ["--from"] else token

    return [full(token) for token in argv]


def _split_from(argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
    if "--from" not in argv:
        return None
    i = list(argv).index("--from")
    if len(argv) < i + 3:
        raise TrainsimError(
            f"--from needs FRAMEWORK CONFIG (one of {', '.join(FRAMEWORKS)}, then its config)"
        )
    kind, config = argv[i + 1], argv[i + 2]
    rest = [*argv[:i], *argv[i + 3 :]]
    if "--from" in rest:
        raise TrainsimError("--from given twice: one framework config per run")
    if kind not in FRAMEWORKS:
        raise TrainsimError(f"--from {kind!r}: unknown framework; allowed: {', '.join(FRAMEWORKS)}")
    return kind, config, rest


def _flag_of(
    parser: argparse.ArgumentParser, setting: Setting, command: str
) -> tuple[str, str | bool] | None:
    """The command's (flag, value) for a setting; None when this command has no such flag."""
    flag, value = setting.flag, setting.value
    if command == "plan" and flag in PLAN_FLAGS:
        flag, switch_value = PLAN_FLAGS[flag]
        value = switch_value if value is True and switch_value else value
    if f"--{flag}" not in parser._option_string_actions:
        if setting.flag in PENDING_FLAGS:
            raise TrainsimError(
                f"--from: {setting.source} needs --{setting.flag} ({PENDING_FLAGS[setting.flag]}), not in this build"
            )
        return None
    if flag == "recompute":
        try:
            parse_recompute(str(value))
        except TrainsimError:
            raise TrainsimError(
                f"--from: {setting.source} needs --recompute {value}, not in this build"
            ) from None
    return flag, value


def expand_from(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, command: str
) -> tuple[list[str], FromRecord | None]:
    """``argv`` with the ``--from`` config's settings put first as flags, and the record of them."""
    argv = _spelled_in_full(parser, sys.argv[1:] if argv is None else argv)
    split = _split_from(argv)
    if split is None:
        return argv, None
    kind, config_text, rest = split
    explicit = _explicit(parser, rest)
    model = getattr(explicit, "model", None)
    config = READERS[kind](config_text, _gpus_hint(explicit), str(model) if model is not None else None)
    settings = _data_parallel_what_if(config.settings) if command == "what_if" else config.settings
    tokens: list[str] = []
    unused: list[str] = []
    for setting in settings:
        mapped = _flag_of(parser, setting, command)
        if mapped is None:
            if setting.flag != "model" or config.shape is None:
                unused.append(setting.flag)
            continue
        flag, value = mapped
        tokens += [f"--{flag}"] if value is True else [f"--{flag}", str(value)]
    given = {a.dest for a in parser._actions if hasattr(explicit, a.dest)}
    overridden = frozenset(s.flag for s in config.settings if _dest(parser, s, command) in given) | (
        frozenset({"model"}) if config.shape is not None and "model" in given else frozenset()
    )
    shown = config_text if len(config_text) < 80 or "\n" not in config_text else config_text[:77] + "..."
    config = FrameworkConfig(config.framework, settings, config.shape, config.ignored)
    record = FromRecord(kind, shown, _with_model(config), overridden, tuple(unused), config.ignored,
                        config.shape if "model" not in given else None)  # fmt: skip
    for flag in unused:
        warn(f"--from {kind}: --{flag} is not an input of this command; its value is not used here")
    return tokens + rest, record


_LAYOUT_ONLY = ("tp", "pp", "cp", "ep", "vpp", "schedule", "sequence-parallel", "cp-kind", "ring-merge",
               "ring-kv")  # fmt: skip


def _data_parallel_what_if(settings: tuple[Setting, ...]) -> tuple[Setting, ...]:
    """The what-if's own terms for a data-parallel config (every degree 1): its data-parallel path,
    which takes full recompute as --checkpoint-activations (any layout flag runs the layout sweep)."""
    if any(s.flag in ("tp", "pp", "cp", "ep") and s.value != "1" for s in settings):
        return settings
    out = []
    for s in settings:
        if s.flag in _LAYOUT_ONLY or (s.flag in ("recompute", "offload") and s.value == "none"):
            continue
        out.append(
            Setting("checkpoint-activations", True, s.source)
            if (s.flag, s.value) == ("recompute", "full")
            else s
        )
    return tuple(out)


def _with_model(config: FrameworkConfig) -> tuple[Setting, ...]:
    if config.shape is None:
        return config.settings
    source = "--num-layers/--hidden-size/... (no preset has this shape)"
    return (Setting("model", str(config.shape.get("name", config.framework)), source), *config.settings)


def _dest(parser: argparse.ArgumentParser, setting: Setting, command: str) -> str | None:
    flag = PLAN_FLAGS[setting.flag][0] if command == "plan" and setting.flag in PLAN_FLAGS else setting.flag
    action = parser._option_string_actions.get(f"--{flag}")
    return action.dest if action is not None else None


def framework_workload(record: FromRecord | None, *, seq_len: int | None, dtype: str) -> Workload | None:
    """The workload of a framework config's own shape (None: the command's ``--model`` stands)."""
    if record is None or record.shape is None:
        return None
    mapping = {k: v for k, v in record.shape.items() if k != "name"}
    where = f"--from {record.framework}"
    shape = transformer.TransformerShape.from_mapping(mapping, where=where)
    name = str(record.shape.get("name", record.framework))
    return transformer.build_workload(name, shape, seq_len=seq_len, dtype=dtype, source=f"{where} arguments")
