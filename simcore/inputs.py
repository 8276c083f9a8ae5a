"""Reading users' input files safely: bounded size, encodings sniffed, YAML that cannot explode.

Every error is a one-line :class:`~simcore.errors.TrainsimError` naming the file:

- :func:`check_input_file`, :func:`read_bytes`, :func:`input_lines`: a regular file (a FIFO
  or a device such as ``/dev/zero`` would block or never end; a folder is not a file) of at most
  a :class:`~simcore.limits.Bound` of bytes, checked from its size before a byte is read;
  ``TRAINSIM_MAX_INPUT_BYTES`` (e.g. ``1GiB``, or a command's ``--max-input-size``) lifts the
  bound. :func:`input_lines` streams a file line by line (record files, long logs).
- :func:`read_text`: at most :data:`~simcore.limits.INPUT_FILE_BYTES`, as above; a byte-order mark selects UTF-8, UTF-16 or UTF-32
  (Windows PowerShell 5's ``>`` writes UTF-16 with a BOM), otherwise the text must be UTF-8;
  binary files and BOM-less UTF-16 are refused with a hint.
- :func:`load_yaml`: PyYAML's safe loader, but the composed document is checked *before* Python
  objects are built: at most :data:`~simcore.limits.YAML_ALIASES` aliases, at most
  :data:`~simcore.limits.YAML_NODES` values with every alias expanded (a "billion laughs" bomb in
  a ``description:`` is refused, not expanded), no alias inside its own anchor, and at most
  :data:`~simcore.limits.YAML_DEPTH` levels of nesting.
- :func:`check_nesting`: the same depth bound for an already-parsed document (JSON).
"""

from __future__ import annotations

import codecs
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcore.errors import TrainsimError
from simcore.limits import INPUT_FILE_BYTES, YAML_ALIASES, YAML_DEPTH, YAML_NODES, Bound
from simcore.units import parse_size
from simcore.yamlload import safe_loader

# PyYAML: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import yaml

__all__ = [
    "LIMIT_ENV",
    "byte_limit",
    "check_input_file",
    "check_nesting",
    "decode_text",
    "input_lines",
    "lift_input_limit",
    "load_yaml",
    "read_bytes",
    "read_text",
    "read_yaml",
]

LIMIT_ENV = "TRAINSIM_MAX_INPUT_BYTES"  # lifts every input-size bound, for the rare huge input
# A command's --max-input-size, for the command running now (None: the environment, else the bound).
_LIFTED: contextvars.ContextVar[int | None] = contextvars.ContextVar("trainsim_input_limit", default=None)

_BOMS = (  # UTF-32 first: its little-endian BOM begins with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8-sig", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"),
)
_UTF8_HINT = (
    "save it as UTF-8 (PowerShell: `... | Out-File -Encoding utf8 FILE`; "
    "elsewhere: `iconv -f utf-16 -t utf-8 FILE > NEW`)"
)


def _looks_utf16(data: bytes) -> bool:
    """Mostly-ASCII UTF-16 without a BOM: one byte of each pair is NUL."""
    sample = data[:4096]
    pairs = len(sample) // 2
    if pairs < 2:
        return False
    nul_odd = sum(1 for b in sample[1::2] if b == 0)
    nul_even = sum(1 for b in sample[0::2] if b == 0)
    return max(nul_odd, nul_even) >= 0.8 * pairs and min(nul_odd, nul_even) <= 0.05 * pairs


def decode_text(data: bytes, where: str, what: str) -> str:
    """``data`` as text (see the module docstring); ``what`` says what the file should be."""
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise TrainsimError(
                    f"{where}: starts with a {label} byte-order mark but byte {exc.start} is not "
                    f"{label}; expected {what}"
                ) from None
    if b"\x00" in data:
        if _looks_utf16(data):
            raise TrainsimError(f"{where}: looks like UTF-16 text without a byte-order mark; {_UTF8_HINT}")
        raise TrainsimError(f"{where}: a binary file (it holds NUL bytes), not text; expected {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainsimError(
            f"{where}: not a UTF-8 text file (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"expected {what}"
        ) from None


def lift_input_limit(limit_bytes: int | None) -> None:
    """``--max-input-size``: read input files of up to ``limit_bytes`` in this command (None: as set
    by :data:`LIMIT_ENV`, else each bound's own limit)."""
    _LIFTED.set(limit_bytes)


def byte_limit(bound: Bound) -> int:
    """The bytes a file under ``bound`` may hold: the bound's, or more where lifted (never less)."""
    lifted = _LIFTED.get()
    if lifted is None and os.environ.get(LIMIT_ENV, "").strip():
        try:
            lifted = int(parse_size(os.environ[LIMIT_ENV]))
        except TrainsimError as exc:
            raise TrainsimError(f"{LIMIT_ENV}={os.environ[LIMIT_ENV]!r}: {exc}") from None
    return bound.limit if lifted is None else max(bound.limit, lifted)


def _check_size(bound: Bound, size: int, where: str) -> None:
    limit = byte_limit(bound)
    try:
        dataclasses.replace(bound, limit=limit).check(size, where, "the file")
    except TrainsimError as exc:
        raise TrainsimError(f"{exc}; set {LIMIT_ENV}=SIZE (e.g. 1GiB) to read a larger file") from None


def check_input_file(path: Path | str, what: str, bound: Bound = INPUT_FILE_BYTES) -> int:
    """The size of the file at ``path`` if it is a regular file within ``bound``; else one line
    naming it (missing, a folder, a FIFO or device, too large). Nothing is read."""
    path = Path(path)
    try:
        if not path.exists():
            raise TrainsimError(f"no such file: {path}")
        if path.is_dir():
            raise TrainsimError(f"{path}: a folder, not a file; expected {what}")
        if not path.is_file():
            raise TrainsimError(f"{path}: not a regular file (a pipe or a device); expected {what}")
        size = path.stat().st_size
    except OSError as exc:
        raise TrainsimError(f"{path}: cannot read: {exc.strerror or exc}") from None
    _check_size(bound, size, str(path))
    return size


def read_bytes(path: Path | str, what: str, bound: Bound = INPUT_FILE_BYTES) -> bytes:
    """The bytes of the file at ``path``, checked by :func:`check_input_file` first."""
    check_input_file(path, what, bound)
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(byte_limit(bound) + 1)
    except OSError as exc:
        raise TrainsimError(f"{path}: cannot read: {exc.strerror or exc}") from None
    _check_size(bound, len(data), str(path))  # it grew while we read it
    return data


def input_lines(path: Path | str, what: str, bound: Bound = INPUT_FILE_BYTES) -> Iterator[str]:
    """The lines of the UTF-8 text file at ``path`` (newlines kept), one at a time: memory stays
    at one line however long the file. Checked by :func:`check_input_file` first."""
    check_input_file(path, what, bound)
    limit, read = byte_limit(bound), 0
    try:
        with Path(path).open(encoding="utf-8", newline="") as handle:
            for line in handle:
                read += len(line)
                if read > limit:
                    _check_size(bound, read, str(path))  # it grew while we read it
                yield line
    except UnicodeDecodeError as exc:
        raise TrainsimError(f"{path}: not a UTF-8 text file ({exc.reason}); expected {what}") from None
    except OSError as exc:
        raise TrainsimError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_text(path: Path | str, what: str) -> str:
    """The text of the file at ``path`` (a user's input: ``what`` names the expected kind of file)."""
    return decode_text(read_bytes(path, what, INPUT_FILE_BYTES), str(Path(path)), what)


def _check_graph(root: yaml.Node, where: str) -> None:
    """Aliases, expanded size, self-reference and depth of a composed document, without recursion."""
    references = 0
    unique: dict[int, yaml.Node] = {id(root): root}
    pending = [root]
    while pending:
        for child in _children(pending.pop()):
            references += 1
            if id(child) not in unique:
                unique[id(child)] = child
                pending.append(child)
    YAML_ALIASES.check(references + 1 - len(unique), where, "the document")
    size: dict[int, int] = {}  # values a node stands for with its aliases expanded
    height: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            open_nodes.discard(key)
            YAML_NODES.check(size[key], where, "the document")
            YAML_DEPTH.check(height[key], where, f"line {node.start_mark.line + 1}")
        elif key in open_nodes:
            raise TrainsimError(
                f"{where}: line {node.start_mark.line + 1}: an alias refers to its own anchor"
            )
        elif key not in size:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def load_yaml(text: str, where: str) -> Any:
    """The YAML document in ``text``, checked against alias bombs and deep nesting before it is built."""
    import yaml

    loader = safe_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TrainsimError(f"{where}: not valid YAML{line}: {problem}") from None
    except TrainsimError:
        raise
    except ValueError as exc:  # Python refuses integers of more than 4300 digits
        reason = "a number has too many digits" if "digits" in str(exc) else str(exc).splitlines()[0]
        raise TrainsimError(f"{where}: a value cannot be read: {reason}") from None
    except RecursionError:
        raise TrainsimError(f"{where}: nested too deeply to read") from None
    finally:
        loader.dispose()


def read_yaml(path: Path | str, what: str) -> Any:
    """The YAML document in the file at ``path`` (see :func:`read_text` and :func:`load_yaml`)."""
    return load_yaml(read_text(path, what), str(path))


def check_nesting(data: Any, where: str) -> Any:
    """``data`` (parsed JSON/YAML) if it nests at most :data:`~simcore.limits.YAML_DEPTH` levels."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            YAML_DEPTH.check(depth, where, "the document")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return data
