"""Command-line pieces every entry point shares: the parser, argparse types, and the ``--out`` policy.

Each ``python -m`` command (``experiments.*``, ``topologies.show``, ``calibrate.*``) builds its
parser from these, so one flag means one thing everywhere:

- :class:`Parser`: argparse whose errors are one ``error: ...`` line with exit status 2 (through
  :func:`simcore.errors.cli_entry`) and whose ``--help`` shows every default;
- comma-separated lists as argparse types (``--gpus 1,8,64``: :func:`int_list`;
  ``--strategies ddp,fsdp``: :func:`name_list`), bounded whole numbers (:func:`int_range`) and sizes
  (:func:`size_bytes`) and finite numbers in a range with their unit (:func:`real_range`), so a
  bad value (NaN, infinity, 1e308, a denormal, a negative) is refused before anything runs; a
  list that repeats an item uses it once and says so;
- ``--model``, ``--format``, ``--quiet`` and ``--out``/``--force`` (:func:`add_out`,
  :func:`output_dir`): nothing a command writes by default can overwrite earlier results; output
  goes to a new ``runs/<command>-<timestamp>/`` folder unless ``--out`` names one, a non-empty
  ``--out`` needs ``--force``, and an ``--out`` that is a file, a dangling symlink or cannot be
  written is reported before any simulation starts; a folder another run is writing (its
  :class:`~simcore.output.OutLock`) is refused with that run's pid. A command whose output is one file (``calibrate.fit -o
  profile.json``) checks it with :func:`output_file`: an existing file needs ``--force``.
"""

from __future__ import annotations

import argparse
import contextvars
import datetime as dt
import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from simcore.errors import TrainsimError, run_scope
from simcore.output import LOCK_NAME, OutLock
from simcore.progress import note
from simcore.units import format_bytes, parse_size
from simcore.workload.user_code import DEFAULT_IMPORT_TIMEOUT_S

__all__ = [
    "CROSS_ENTROPY_CHOICES",
    "MAX_MESSAGE_BYTES",
    "PROG",
    "RUNS_DIR",
    "SAVED_TENSOR_CHOICES",
    "Parser",
    "add_format",
    "add_framework_levers",
    "add_model",
    "add_out",
    "add_quiet",
    "framework_config",
    "framework_lever_notes",
    "int_list",
    "int_range",
    "name_list",
    "new_run_dir",
    "output_dir",
    "output_file",
    "png_file",
    "positive_int",
    "real_range",
    "size_bytes",
]

# The console script (``trainsim what-if``) sets this so a command's usage line names how it was run.
PROG: contextvars.ContextVar[str | None] = contextvars.ContextVar("trainsim_prog", default=None)
_FLAG: contextvars.ContextVar[str] = contextvars.ContextVar("trainsim_flag", default="")  # being parsed
RUNS_DIR = Path("runs")  # relative to the working directory; ignored by git
# 1 PiB: no collective buffer of a real job comes near it (a 141 GB H200 x 4096 GPUs is 0.5 PiB in all).
MAX_MESSAGE_BYTES = 2**50


def _no_default(default: object) -> bool:
    """No default worth showing: None, a flag's False, or suppressed (0 is a default: not ``in``)."""
    return default is None or default is False or default is argparse.SUPPRESS


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to every option's help that has a default and does not say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text.lower()
            or _no_default(default)
            or (not action.option_strings and action.nargs in (None, "+"))
            or isinstance(default, list)
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` for trainsim commands.

    Errors raise :class:`TrainsimError` (one ``error:`` line, exit 2 under ``cli_entry``) instead of
    printing the usage; ``--help`` shows defaults; ``prog`` is replaced by :data:`PROG` when the
    console script set it.
    """

    def __init__(self, prog: str, description: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(prog=PROG.get() or prog, description=description, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        # argparse prints nothing, default included, for an option without help: give it one.
        default = kwargs.get("default")
        if kwargs.get("help") is None and not _no_default(default):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        # the flag being converted, so a type's note can name it (``--tp '8,8' repeats 8``)
        token = _FLAG.set(action.option_strings[-1] if action.option_strings else action.dest)
        try:
            return super()._get_value(action, arg_string)
        finally:
            _FLAG.reset(token)

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --gpus: ..."; the flag alone reads better on one line.
        raise TrainsimError(message.removeprefix("argument "))


def _type(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type whose errors keep their message (argparse hides a ValueError's)."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except TrainsimError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


def _int(text: str, low: int, high: int | None) -> int:
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise TrainsimError(f"expected a whole number, got {text!r}") from None
    if value < low or (high is not None and value > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise TrainsimError(f"{value} is out of range; allowed {allowed}")
    return value


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``high`` None: no upper bound)."""
    return _type("int", lambda text: _int(text, low, high))


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    return int_range(1)(text)


def _real(text: str, low: float, high: float, unit: str) -> float:
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise TrainsimError(f"expected a number, got {text!r}") from None
    shown = f" {unit}" if unit else ""
    if not math.isfinite(value):
        raise TrainsimError(f"{text.strip()!r} is not a finite number; allowed {low:g}..{high:g}{shown}")
    if 0 < abs(value) < sys.float_info.min:  # a denormal: it underflows to 0 or overflows a division
        raise TrainsimError(
            f"{text.strip()!r} is too small to compute with; allowed {low:g}..{high:g}{shown}"
        )
    if not low <= value <= high:
        raise TrainsimError(f"{value:g}{shown} is out of range; allowed {low:g}..{high:g}{shown}")
    return value


def real_range(low: float, high: float, *, unit: str = "") -> Callable[[str], float]:
    """A finite number in ``low..high`` (``unit`` names what it counts, shown in errors).

    Both ends are real bounds, never 0 or infinity, so NaN, infinity, ``1e308`` and denormal
    ``1e-320`` are refused with the range allowed instead of turning into ``$inf`` or a division
    by a number that underflows.
    """
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"real_range({low}, {high}) is not a finite range")
    return _type("number", lambda text: _real(text, low, high, unit))


def _note_repeats(text: str, items: Sequence[object], kept: Sequence[object]) -> None:
    """Say once on stderr that a list named something twice (it is used once)."""
    if len(kept) < len(items):
        repeated = sorted({str(item) for item in items if items.count(item) > 1})
        flag = f"{_FLAG.get()} " if _FLAG.get() else ""
        note(f"{flag}{text!r} repeats {', '.join(repeated)}; each is used once", quiet=False)


def int_list(low: int = 1, high: int | None = None, *, max_items: int = 64) -> Callable[[str], list[int]]:
    """``8`` or ``1,8,64``: whole numbers in ``low..high``, at most ``max_items``, duplicates dropped."""

    def convert(text: str) -> list[int]:
        parts = [part for part in text.split(",") if part.strip()]
        if not parts:
            raise TrainsimError(f"expected a number or a comma list of numbers, got {text!r}")
        if len(parts) > max_items:
            raise TrainsimError(f"{len(parts)} values given; at most {max_items}")
        values = [_int(part, low, high) for part in parts]
        kept = list(dict.fromkeys(values))
        _note_repeats(text, values, kept)
        return kept

    return _type("int list", convert)


def _allowed(choices: Sequence[str]) -> str:
    """The allowed names for an error, never an empty list."""
    return ", ".join(choices) if choices else "none are available here"


def name_list(
    allowed: Sequence[str] | Callable[[], Sequence[str]],
    *,
    what: str = "name",
    normalize: Callable[[str], str] = str.strip,
) -> Callable[[str], list[str]]:
    """``ddp,fsdp``: names from ``allowed`` (a list, or a function giving it lazily), duplicates dropped.

    ``what`` names one item in the error (``unknown strategy 'zero4'; allowed: ...``).
    """

    def convert(text: str) -> list[str]:
        names = [normalize(part.strip()) for part in text.split(",") if part.strip()]
        choices = list(allowed() if callable(allowed) else allowed)
        bad = [name for name in names if name not in choices]
        if bad:
            raise TrainsimError(f"unknown {what} {bad[0]!r}; allowed: {_allowed(choices)}")
        if not names:
            raise TrainsimError(
                f"expected a comma list of {what}s, got {text!r}; allowed: {_allowed(choices)}"
            )
        kept = list(dict.fromkeys(names))
        _note_repeats(text, names, kept)
        return kept

    return _type("name list", convert)


def size_bytes(*, allow_zero: bool = True, high: float = MAX_MESSAGE_BYTES) -> Callable[[str], int]:
    """A size such as ``8``, ``1K``, ``25MiB`` (nccl-tests' suffixes), at most ``high`` bytes."""

    def convert(text: str) -> int:
        value = parse_size(text, allow_zero=allow_zero)
        if value > high:
            raise TrainsimError(f"size {text!r} is larger than the {format_bytes(high)} allowed")
        return int(value)

    return _type("size", convert)


def png_file(text: str) -> Path:
    """``--png PATH``: a file name ending in ``.png`` or with no suffix (written exactly as given, as
    PNG); any other suffix is refused, since the file would not be what its name says."""
    path = Path(text)
    if not text.strip() or text.endswith(("/", "\\")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a file name; give e.g. plot.png")
    if path.suffix and path.suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(
            f"{text!r} ends in {path.suffix!r}; a PNG file name ends in .png (or has no suffix)"
        )
    return path


def add_model(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--model",
        default=default,
        help="preset name (e.g. llama2-7b), shape file (YAML/JSON), Hugging Face config.json or model "
        "folder, or package.module:factory (or file.py:factory)",
    )
    parser.add_argument(
        "--import-timeout",
        type=_positive_seconds,
        default=DEFAULT_IMPORT_TIMEOUT_S,
        metavar="SECONDS",
        help="time limit on importing and tracing a --model package.module:factory (it runs in a "
        "child process)",
    )


def add_clock_levers(group: Any, *, rank_spread_note: str = "") -> None:
    """``--power-limit`` and ``--no-rank-spread``, the what-if's and the planner's alike."""
    group.add_argument(
        "--power-limit",
        # a board limit at all here; the device's own settable range is checked once the cluster is
        # known (simcore.compute.power.check_power_limit), so --help reads no data file
        type=real_range(1.0, 5000.0, unit="W"),
        metavar="WATTS",
        help="board power limit per GPU (nvidia-smi -pl); below the device's default its kernels run at "
        "the sustained clock of the cap (default: the device's default limit)",
    )
    group.add_argument(
        "--no-rank-spread",
        action="store_true",
        help="every GPU at the median GPU's speed (default: a synchronous step of N GPUs computes at the "
        f"expected slowest of N{rank_spread_note})",
    )


# The choices of --saved-tensors and --cross-entropy, written out so ``--help`` imports no model
# module; a test holds them equal to simcore.compute.saved_tensors.SAVED_TENSOR_RULES and
# simcore.compute.memory.CROSS_ENTROPY_KERNELS.
SAVED_TENSOR_CHOICES = ("eager", "megatron-te")
CROSS_ENTROPY_CHOICES = ("torch", "megatron")


def add_framework_levers(group: Any) -> None:
    """``--saved-tensors``, ``--cross-entropy`` and ``--zero3-per-rank-lists``: whose kernels and
    collectives the run uses, the what-if's and the planner's alike (:func:`framework_config`)."""
    group.add_argument(
        "--saved-tensors",
        choices=list(SAVED_TENSOR_CHOICES),
        default=SAVED_TENSOR_CHOICES[0],
        help="activations saved for backward as eager PyTorch keeps them (torchtitan, Hugging Face) or "
        "as Megatron-Core on Transformer Engine's fused kernels does (megatron-te: fused norm-linear, "
        "RoPE and SwiGLU keep less)",
    )
    group.add_argument(
        "--cross-entropy",
        choices=list(CROSS_ENTROPY_CHOICES),
        default=CROSS_ENTROPY_CHOICES[0],
        help="the loss kernel: torch (F.cross_entropy: a logits copy and its log-softmax) or megatron "
        "(Megatron-Core's vocab-parallel cross entropy, in place)",
    )
    group.add_argument(
        "--zero3-per-rank-lists",
        action="store_true",
        help="DeepSpeed ZeRO-3 as v0.3.13-v0.5.4 ran it: one list collective per parameter tensor and a "
        "device sync per fetch (default: today's flat-buffer collectives); FSDP is not affected",
    )
    # DeepSpeed's ZeRO-1/2 zero_optimization keys (deepspeed/runtime/zero/config.py), which the
    # ZeRO-1/2 step reads as TrainingConfig.zero_bucket_elements / zero_allgather_bucket_elements /
    # zero_overlap_comm; unset, DeepSpeed's defaults (5e8 elements each, overlap off below stage 3)
    group.add_argument(
        "--zero-bucket-size", type=int_range(1, 2**40), default=None, metavar="ELEMENTS",
        help="ZeRO-1/2 gradient reduction bucket in elements (DeepSpeed reduce_bucket_size; default 5e8)",
    )  # fmt: skip
    group.add_argument(
        "--zero-allgather-bucket-size", type=int_range(1, 2**40), default=None, metavar="ELEMENTS",
        help="ZeRO-1/2 parameter all-gather bucket in elements (DeepSpeed allgather_bucket_size; default 5e8)",
    )  # fmt: skip
    group.add_argument(
        "--zero-overlap-comm", choices=["on", "off"], default=None,
        help="ZeRO-1/2 gradient reduction overlapped with backward (DeepSpeed overlap_comm; default off)",
    )  # fmt: skip
    # ZeRO-3's fetch tuning (TrainingConfig.zero3_prefetch_bucket_params / zero3_max_live_params /
    # zero3_max_reuse_distance; unset, DeepSpeed's defaults in simcore/data/efficiency.yaml)
    for flag, key in (("--zero3-prefetch-bucket-size", "stage3_prefetch_bucket_size"),
                      ("--zero3-max-live-parameters", "stage3_max_live_parameters"),
                      ("--zero3-max-reuse-distance", "stage3_max_reuse_distance")):  # fmt: skip
        group.add_argument(
            flag, type=int_range(1, 2**40), default=None, metavar="ELEMENTS",
            help=f"ZeRO-3 parameter fetch tuning in elements (DeepSpeed {key}; default DeepSpeed's)",
        )  # fmt: skip


def framework_lever_notes(
    args: argparse.Namespace, transformer: bool, strategies: Sequence[str]
) -> list[str]:
    """Why a lever of :func:`add_framework_levers` given here changes nothing (a warning each):
    megatron-te on a model without transformer blocks, per-rank lists with no ZeRO-3 to run."""
    notes = []
    if args.saved_tensors != SAVED_TENSOR_CHOICES[0] and not transformer:
        notes.append(
            f"--saved-tensors {args.saved_tensors} changes only transformer blocks; this model has none"
        )
    if args.zero3_per_rank_lists and "zero3" not in strategies:
        notes.append(
            "--zero3-per-rank-lists changes only DeepSpeed ZeRO-3 (zero3), which is not among the strategies"
        )
    return notes


def framework_config(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~simcore.strategies.base.TrainingConfig` fields :func:`add_framework_levers` sets."""
    zero = {"zero_bucket_elements": args.zero_bucket_size, "zero_allgather_bucket_elements": args.zero_allgather_bucket_size,
            "zero_overlap_comm": None if args.zero_overlap_comm is None else args.zero_overlap_comm == "on",
            "zero3_prefetch_bucket_params": args.zero3_prefetch_bucket_size,
            "zero3_max_live_params": args.zero3_max_live_parameters,
            "zero3_max_reuse_distance": args.zero3_max_reuse_distance}  # fmt: skip
    return {"cross_entropy": args.cross_entropy, "zero3_per_rank_lists": args.zero3_per_rank_lists,
            **{k: v for k, v in zero.items() if v is not None}}  # fmt: skip


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 86_400):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 seconds, got {text!r}")
    return value


def add_format(parser: argparse.ArgumentParser, choices: Sequence[str], default: str = "table") -> None:
    parser.add_argument("--format", default=default, choices=list(choices), help="output format")


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="no progress bar or notes on stderr (errors still show)"
    )


def add_out(parser: argparse.ArgumentParser, what: str, *, default_new: bool) -> None:
    """``--out DIR`` and ``--force``; ``default_new``: without ``--out`` a new runs/ folder is used."""
    where = f"a new {RUNS_DIR}/<command>-<time> folder" if default_new else "nothing is written"
    parser.add_argument("--out", metavar="DIR", help=f"folder for {what} (default: {where})")
    parser.add_argument(
        "--force", action="store_true", help="write into --out even when it already holds files"
    )


def new_run_dir(command: str, *, now: dt.datetime | None = None) -> Path:
    """``runs/<command>-<YYYYmmdd-HHMMSS>`` that does not exist yet (``-2``, ``-3``... if taken)."""
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = RUNS_DIR / f"{command}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def output_dir(out: str | None, *, force: bool, command: str | None = None) -> Path | None:
    """Check ``--out`` before any work: the folder a command may write, or None for no files.

    ``out`` None gives :func:`new_run_dir` of ``command`` (None when the command writes nothing
    by default). Refused, with one error line: an existing file, a dangling symlink, a folder that
    already holds files (unless ``force``), a place this user cannot write, and a folder another
    run holds. Under :func:`~simcore.errors.cli_entry` the folder is made and locked until the
    command ends (and removed again if it stayed empty).
    """
    if out is None:
        if command is None:
            return None
        path = new_run_dir(command)
    else:
        path = Path(out)
        if path.is_symlink() and not path.exists():
            raise TrainsimError(
                f"--out {out!r} is a symlink to {str(path.resolve())!r}, which does not exist"
            )
        if path.exists() and not path.is_dir():
            raise TrainsimError(f"--out {out!r} is an existing file; give a folder (new or empty)")
        if path.is_dir() and not force and any(p.name != LOCK_NAME for p in path.iterdir()):
            raise TrainsimError(
                f"--out {out!r} already holds files; choose a new folder, or add --force to write into it"
            )
    _check_writable(path, out)
    scope = run_scope()
    if scope is not None:  # held until the command ends: a second run on this folder is refused
        scope.enter_context(OutLock(path))
    return path


def output_file(out: str, *, force: bool, flag: str = "--out") -> Path:
    """Check an output file before any work: refused, with one error line, when it already exists
    (unless ``force``), names a folder, or is in a place this user cannot write. Creates nothing."""
    path = Path(out)
    if path.is_dir():
        raise TrainsimError(f"{flag} {out!r} is a folder; give the file to write")
    if path.exists() and not force:
        raise TrainsimError(f"{flag} {out!r} already exists; choose a new file, or add --force to replace it")
    _check_writable(path.parent, out, flag)
    return path


def _check_writable(path: Path, given: str | None, flag: str = "--out") -> None:
    """The nearest existing ancestor must be a folder this process can create a folder in.

    Tried, not inferred from permission bits (root passes ``os.access`` on read-only mounts): a
    hidden folder is made there and removed at once.
    """
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    shown = given if given is not None else str(path)
    if not probe.is_dir():
        raise TrainsimError(f"{flag} {shown!r}: {str(probe)!r} is a file, so the folder cannot be made")
    try:
        with tempfile.TemporaryDirectory(prefix=".trainsim-write-check-", dir=probe):
            pass
    except OSError as exc:
        raise TrainsimError(f"{flag} {shown!r}: cannot write in {str(probe)!r} ({exc.strerror})") from None
