"""Every numeric flag of every entry point is validated once, by a bounded argparse type.

Each command's parser is caught as it parses (nothing runs). Structurally, no flag takes a bare
``float`` or ``int`` (which accept NaN, infinity, 1e308 or any size); then every numeric type is
fed NaN, infinity, 1e308, 1e-320, negatives and huge whole numbers, and must refuse each with one
line or give a finite number of sane size; and in process, ``main([flag, value])`` ends with
status 2 and one ``error:`` line naming the flag, never a traceback.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.bench.planner import ENTRY_POINTS
from simcore.errors import TrainsimError
from tests.fuzzing import check_cli_outcome, run_cli
from tests.paths import REPO

# Every command but the console script, which hands its arguments to one of the others.
COMMANDS = tuple(c for c in ENTRY_POINTS if c != "experiments.console")
# The values that broke commands before (issue 23): NaN usable memory, $inf, a denormal price.
BAD_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e400", "1e-320", "-1", "-0.5", "9" * 30)
# Type names of the bounded argparse types (simcore.cliargs._type names them) and the plan's counts.
NUMERIC_TYPES = {"int", "number", "int list", "size", "_count", "_positive_int", "positive_int"}


def _main_module(command: str) -> str:
    """The module a ``python -m`` command's ``__main__`` takes ``main`` from (itself when it has no
    ``__main__``; the console's entry for it when ``__main__`` goes through ``run_module``)."""
    from experiments.console import COMMANDS

    main_file = REPO / command.replace(".", "/") / "__main__.py"
    if not main_file.exists():
        return command
    routed = {c.module: c.main_module for c in COMMANDS.values()}
    if command in routed and "run_module" in main_file.read_text(encoding="utf-8"):
        return routed[command]
    for node in ast.parse(main_file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "main" for a in node.names):
            return node.module
    return command


def _parser(command: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``command`` builds, caught when it starts parsing (any ArgumentParser)."""
    try:
        module = importlib.import_module(_main_module(command))
    except ModuleNotFoundError as exc:
        if str(exc.name).split(".")[0] != "torch":
            raise
        pytest.skip(f"{command} imports torch")
    built: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        built.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    if not built:
        pytest.skip(f"{command} builds no parser")
    return built[0]


def _numeric_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a for a in parser._actions
        if a.option_strings and getattr(a.type, "__name__", None) in NUMERIC_TYPES
    ]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_no_flag_takes_a_bare_float_or_int(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser(command, monkeypatch)
    bare = [a.option_strings[0] for a in parser._actions if a.type in (float, int)]
    assert not bare, f"{command}: {bare} take float/int, which accept nan, inf and 1e308; use simcore.cliargs"


def _refused_or_sane(convert: Any, text: str) -> None:
    try:
        value = convert(text)
    except (argparse.ArgumentTypeError, TrainsimError) as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
        return
    for number in value if isinstance(value, list) else [value]:
        assert math.isfinite(number), f"{text!r} gave {number!r}"
        assert abs(number) < 1e300, f"{text!r} gave {number!r}"
        assert number == 0 or abs(number) > 1e-300, f"{text!r} gave the denormal {number!r}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_numeric_type_refuses_non_finite_and_absurd_values(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for action in _numeric_actions(_parser(command, monkeypatch)):
        for text in BAD_NUMBERS:
            _refused_or_sane(action.type, text)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_parses_odd_numbers_or_refuses_them_in_one_line(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every option that takes a value, numeric or not (a size, a ratio, a name), parsed with each
    odd number: a value or one error, never another exception (nothing runs: parsing only)."""
    parser = _parser(command, monkeypatch)
    monkeypatch.undo()  # parse for real
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
            continue
        for text in BAD_NUMBERS:
            try:
                parser.parse_args([action.option_strings[0], text])
            except TrainsimError as exc:
                assert "\n" not in str(exc), (command, action.option_strings[0], text, str(exc))
            except SystemExit as exc:  # a plain argparse parser's own error (usage and status 2)
                assert exc.code == 2, (command, action.option_strings[0], text)


def test_the_check_catches_a_bare_float() -> None:
    """The structural check and the value check can fail (no test that cannot fail)."""
    with pytest.raises(AssertionError):
        _refused_or_sane(float, "nan")
    with pytest.raises(AssertionError):
        _refused_or_sane(float, "1e-320")


def _flags(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    found = []
    for command in COMMANDS:
        try:
            parser = _parser(command, monkeypatch)
        except pytest.skip.Exception:
            continue
        found += [(command, a.option_strings[-1]) for a in _numeric_actions(parser)]
    return found


def test_main_refuses_every_non_finite_number_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: ``main([flag, value])`` of every numeric flag, exit 2 and one line naming it."""
    with monkeypatch.context() as patched:
        flags = _flags(patched)
    assert len(flags) > 40, flags  # every entry point's numeric flags were found
    mains = {command: importlib.import_module(_main_module(command)).main for command, _ in flags}

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(flags), st.sampled_from(("nan", "inf", "-inf", "1e308", "1e400", "-1e308")))
    def one(flag: tuple[str, str], value: str) -> None:
        command, name = flag
        argv = [name, value]
        code, out, err = run_cli(mains[command], argv, seconds=60)
        check_cli_outcome(argv, code, out, err)
        assert code == 2, f"{command} {argv}: exit {code}"
        assert name in err or name.lstrip("-") in err, f"{command} {argv}: {err}"

    one()
