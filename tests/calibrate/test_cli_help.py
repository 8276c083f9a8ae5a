"""``--help`` of every calibration entry point shows every default and renders."""

from __future__ import annotations

import argparse
import ast
import importlib
from typing import Any

import pytest

from simcore import cliargs
from tests.paths import REPO


def _entry_points() -> dict[str, str]:
    """``calibrate.<job>`` -> the module its ``__main__`` takes ``main`` from."""
    found = {}
    for main_file in sorted((REPO / "calibrate").glob("*/__main__.py")):
        for node in ast.parse(main_file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "main" for a in node.names):
                found[f"calibrate.{main_file.parent.name}"] = node.module
    return found


ENTRY_POINTS = _entry_points()


def _parser_of(module_name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser a job builds, caught as it starts to parse ``--help``."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if str(exc.name).split(".")[0] != "torch":
            raise
        pytest.skip(f"{module_name} imports torch")
    built: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        built.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(cliargs.Parser, "parse_args", capture)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    return built[0]


def test_every_job_is_found() -> None:
    jobs = {
        "collectives",
        "compute",
        "fit",
        "nccl_tests",
        "memory_truth",
        "train",
        "testbed",
        "cluster",
        "gpu_suite",
    }
    assert set(ENTRY_POINTS) == {f"calibrate.{job}" for job in jobs}


@pytest.mark.parametrize("job", sorted(ENTRY_POINTS))
def test_help_shows_every_default(job: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser_of(ENTRY_POINTS[job], monkeypatch)
    assert isinstance(parser, cliargs.Parser), f"{job} builds its own parser: use simcore.cliargs.Parser"
    text = parser.format_help()  # renders: no stray % in a help string
    assert text.startswith(f"usage: python -m {job}")
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
            continue
        shown = formatter._get_help_string(action) or ""
        assert action.help and "default" in shown.lower(), f"{job} {action.option_strings}: {shown!r}"
