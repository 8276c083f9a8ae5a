"""Shared pieces of the input-format fuzz suites: mutations of real files, and what every run must show.

A fuzz test starts from files the project ships or tests (presets, captures, shape files), mutates
them (a value swapped for an odd one, a key dropped or added, characters edited, another text
encoding) and checks the contract for bad input: the reader either succeeds or raises
:class:`~simcore.errors.TrainsimError` (one line, exit 2 in a CLI), never another exception, never
a non-finite number, and within a time bound (hypothesis ``deadline``). :data:`FUZZ` runs a few
examples in the default test run; :data:`FUZZ_SLOW` many more (``-m slow``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from simcore.topology import Topology

__all__ = [
    "FLAG",
    "FUZZ",
    "FUZZ_SLOW",
    "GARBAGE",
    "SCALARS",
    "VALUES",
    "assert_cli_contract",
    "assert_finite_topology",
    "assert_one_line",
    "check_cli_outcome",
    "encoded",
    "flag_argv",
    "flag_choice",
    "flag_ints",
    "inside",
    "mutated_document",
    "mutated_text",
    "run_cli",
    "time_bound",
]

_COMMON = dict(
    deadline=timedelta(seconds=10),  # every example is bounded; real ones take milliseconds
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,  # capsys: each example reads its own output
    ],
)
FUZZ = settings(max_examples=30, **_COMMON)  # type: ignore[arg-type]
FUZZ_SLOW = settings(max_examples=500, **_COMMON)  # type: ignore[arg-type]

# Values that have broken readers before, or sit at a bound: units at the edges of the physical
# ranges, brace ranges far past the device bounds, YAML-ish text, sizes around the bounds.
ODD_STRINGS = (
    "1e-300GB/s",
    "0GB/s",
    "-5us",
    "1e400GB/s",
    "99999TB/s",
    "400Gb/s",
    "1us",
    "0us",
    "nan",
    "inf",
    "-inf",
    "2:1",
    "0:1",
    "1:0",
    "121",
    "gpu{0..99999999}",
    "gpu{0..7}",
    "gpu{0..3}",
    "nic{0,1}",
    "gpu{0..3}{0..1}",
    "NV999",
    "",
    " ",
    "x" * 300,
    "line\nbreak",
    "tab\tbed",
    "\x00",
    "h100-sxm",
    "a10g",
    "a100-sxm-80gb",
    "cpu",
    "gpu",
    "nic",
    "switch",
    "nvswitch",
    "pcie",
    "ib",
    "ethernet",
    "loopback",
    "leaf-spine",
    "rail-optimised",
    "none",
    "sharp",
    "nvls",
    "transformer",
    "conv",
    "linear",
    "residual",
    "relu",
    "bf16",
)
ODD_INTS = (0, 1, -1, 2, 3, 7, 8, 64, 1024, 1025, 65536, 65537, 10**8, 2**31, 2**63, 10**30)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 100),
    st.sampled_from(ODD_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD_STRINGS),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=6)), inner, max_size=3),
    ),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _paths(value, (*prefix, index))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


@st.composite
def mutated_document(draw: st.DrawFn, seeds: Sequence[Any]) -> Any:
    """One of ``seeds`` (parsed YAML/JSON documents) with one to three random edits.

    Most edits swap one leaf (a number, a string) for an odd scalar, so the reader gets past the
    document's structure to its values; the rest replace, drop or add whole subtrees.
    """
    doc = copy.deepcopy(draw(st.sampled_from(list(seeds))))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        leaves = [p for p in paths if p and not isinstance(_parent(doc, (*p, None)), dict | list)]
        at_leaf = bool(leaves) and draw(st.sampled_from((True, True, True, False)))
        path = draw(st.sampled_from(leaves if at_leaf else paths))
        action = "replace" if at_leaf else draw(st.sampled_from(("replace", "delete", "insert")))
        if not path:
            if action == "replace":
                doc = draw(VALUES)
            continue
        parent = _parent(doc, path)
        if action == "replace":
            parent[path[-1]] = draw(SCALARS if at_leaf else VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=6)))] = draw(VALUES)
        else:
            parent.insert(path[-1], draw(VALUES))
    return doc


_EDIT_CHARS = ":{}[]&*!|>-#'\"\t\n ,.0123456789aeiouNVX\x00\u00e9\u2028\ufeff"


@st.composite
def mutated_text(draw: st.DrawFn, seeds: Sequence[str]) -> str:
    """One of ``seeds`` (file texts) with a few character edits (insert, delete, replace, cut)."""
    text = draw(st.sampled_from(list(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(("insert", "delete", "replace") * 3 + ("cut",)))
        chars = draw(st.text(alphabet=_EDIT_CHARS, min_size=1, max_size=4))
        if action == "insert":
            text = text[:at] + chars + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + len(chars) :]
        elif action == "replace":
            text = text[:at] + chars + text[at + len(chars) :]
        else:
            text = text[:at]
    return text


@st.composite
def encoded(draw: st.DrawFn, text: str) -> bytes:
    """``text`` as bytes in an encoding a user's file might have (or with binary damage)."""
    how = draw(st.sampled_from(("utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "damaged")))
    if how == "damaged":
        data = bytearray(text.encode("utf-8"))
        for _ in range(draw(st.integers(1, 4))):
            data.insert(draw(st.integers(0, len(data))), draw(st.integers(0, 255)))
        return bytes(data)
    return text.encode(how, errors="replace")


def assert_one_line(exc: BaseException) -> None:
    """A user error is one line: what was wrong and what is allowed."""
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)


def assert_finite_topology(topo: Topology) -> None:
    """Every link's bandwidth and latency, and every NIC port speed, is a finite number."""
    topo.validate()
    for u, v, attrs in topo.graph.edges(data=True):
        for key in ("bandwidth_Bps", "latency_s"):
            assert math.isfinite(attrs[key]), f"{u} -> {v}: {key} = {attrs[key]!r}"
    for node, attrs in topo.graph.nodes(data=True):
        if "port_Bps" in attrs:
            assert math.isfinite(attrs["port_Bps"]), f"{node}: port_Bps = {attrs['port_Bps']!r}"


def _refuse_constant(name: str) -> Any:
    raise AssertionError(f"non-finite number {name} in the JSON output")


def assert_cli_contract(
    main: Callable[[list[str]], object], argv: list[str], capsys: Any, *, json_out: bool = False
) -> int:
    """Run a CLI ``main`` in process: exit 0 or 2, at most one ``error:`` line, no traceback.

    With ``json_out`` the output is parsed as JSON and must hold no NaN or Infinity.
    """
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, 2), f"exit {code!r}: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error_lines) <= 1, err
    if code == 2:
        assert len(error_lines) == 1, err
    if json_out and code == 0:
        json.loads(out, parse_constant=_refuse_constant)
    return int(code or 0)


# A non-finite number as a command prints it (``nan``, ``-inf``, ``Infinity``), not inside a word.
NON_FINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w.])", re.IGNORECASE)


@contextlib.contextmanager
def time_bound(seconds: int) -> Iterator[None]:
    """Fail an example that runs longer than ``seconds`` (a hang), from a SIGALRM."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"one example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run in ``folder``, so relative and default outputs land there (contextlib.chdir is 3.11+)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli(main: Callable[[list[str]], object], argv: list[str], seconds: int = 60) -> tuple[int, str, str]:
    """(status, stdout, stderr) of ``main(argv)`` in process, within ``seconds``; any exception other
    than SystemExit propagates (a traceback is a failure)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_bound(seconds):
        try:
            returned = main(argv)
            code = returned if isinstance(returned, int) else 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


def check_cli_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    """Exit 0 or 2, no traceback, one ``error:`` line exactly when it failed, no non-finite number."""
    shown = f"argv {argv}:\nstdout: {out[-1500:]}\nstderr: {err[-1500:]}"
    assert code in (0, 2), shown
    assert "Traceback" not in out + err, shown
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) <= 1, shown
    assert (code == 2) == bool(errors), shown
    assert not NON_FINITE.search(out), shown


# --- command lines -----------------------------------------------------------------------------------

FLAG = None  # in a table of flag values: a flag that takes no value
# Values no flag takes: empty, signs, overflow, huge and denormal, non-finite, empty list items, non-ASCII, long digits.
GARBAGE = st.sampled_from(
    [
        "",
        "x",
        "-1",
        "0",
        "1e400",
        "1e308",
        "1e-320",
        "nan",
        "inf",
        "-inf",
        "1,,2",
        ",",
        "ü",
        "9" * 30,
        "1:2:3",
    ]
)


def flag_ints(*valid: int) -> st.SearchStrategy[str]:
    """An integer flag's value: one of ``valid``, any small or large integer, or garbage."""
    return st.one_of(st.sampled_from([str(v) for v in valid]), st.integers(-3, 10**7).map(str), GARBAGE)


def flag_choice(*valid: str) -> st.SearchStrategy[str]:
    """A flag's value: one of ``valid`` or garbage."""
    return st.one_of(st.sampled_from(valid), GARBAGE)


@st.composite
def flag_argv(draw: st.DrawFn, flags: Mapping[str, st.SearchStrategy[Any]]) -> list[str]:
    """Up to four of ``flags`` (flag -> strategy of its value, or of :data:`FLAG`), in random order."""
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), max_size=4, unique=True))
    argv: list[str] = []
    for flag in chosen:
        value = draw(flags[flag])
        argv += [flag] if value is FLAG else [flag, value]
    return argv
