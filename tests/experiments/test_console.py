"""The ``trainsim`` console script: a subcommand per ``python -m`` entry point, same flags, same output."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

from experiments import console
from experiments.console import COMMANDS, main
from experiments.nccl_sim.cli import main as nccl_sim_main
from tests.paths import REPO
from topologies.show import main as show_main


def test_every_python_m_entry_point_has_a_subcommand() -> None:
    entry_points = {
        ".".join(path.relative_to(REPO).parent.parts)
        for package in ("experiments", "calibrate", "topologies")
        for path in (REPO / package).rglob("__main__.py")
    } | {"topologies.show"}
    assert entry_points == {command.module for command in COMMANDS.values()}


def test_subcommand_names_follow_the_module_names() -> None:
    for name, command in COMMANDS.items():
        package, _, leaf = command.module.partition(".")
        expected = {"experiments": leaf, "calibrate": f"calibrate-{leaf}", "topologies": leaf}[package]
        assert name == expected.replace("_", "-")


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, command in COMMANDS.items():
        assert f"  {name} " in out and command.summary in out


def test_help_imports_no_subcommand_module() -> None:
    """``trainsim --help`` starts at once: it lists the commands without importing any of them."""
    script = (
        "import sys; from experiments.console import COMMANDS, main; main(['--help']); "
        "print(sorted(c.main_module for c in COMMANDS.values() if c.main_module in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.splitlines()[-1] == "[]"
    assert "what-if" in result.stdout


def test_a_subcommand_prints_what_its_module_prints(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--cluster", "dgx-a100", "--gpus", "16", "-b", "1K", "-e", "1M", "-f", "32"]
    assert nccl_sim_main(argv) == 0
    module_out = capsys.readouterr().out
    assert main(["nccl-sim", *argv]) == 0
    assert capsys.readouterr().out == module_out
    assert show_main(["dgx-a100", "--nodes", "2"]) == 0
    module_out = capsys.readouterr().out
    assert main(["show", "dgx-a100", "--nodes", "2"]) == 0
    assert capsys.readouterr().out == module_out


def test_subcommand_usage_names_the_console_script(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["what-if", "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: trainsim what-if ")
    with pytest.raises(SystemExit):
        nccl_sim_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m experiments.nccl_sim ")


def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown command 'no-such-command'") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["nccl-sim", "--gpus", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --gpus: 0 is out of range") and err.count("\n") == 1
    assert main([]) == 2 and "usage: trainsim COMMAND" in capsys.readouterr().err


def test_pyproject_installs_the_console_script() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"] == {"trainsim": "experiments.console:main"}


def test_python_m_of_the_console_module_runs_a_subcommand() -> None:
    """Once as a user runs it, in a fresh interpreter (what the installed script does)."""
    result = subprocess.run(
        [sys.executable, "-m", "experiments.console", "show", "--cluster", "dgx-a100"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith("topology: dgx-a100")


def _parser_of(command: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The parser a subcommand builds (caught as it starts to parse ``--help``)."""
    from simcore import cliargs

    built: list[cliargs.Parser] = []

    def capture(self: cliargs.Parser, args: Any = None, namespace: Any = None) -> Any:
        built.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(cliargs.Parser, "parse_args", capture)
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return built[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_shows_every_default(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if command.startswith("calibrate-") and command not in ("calibrate-fit", "calibrate-nccl-tests"):
        pytest.importorskip("torch")
    parser = _parser_of(command, monkeypatch)
    formatter = parser._get_formatter()
    for action in parser._actions:
        default = action.default
        if not action.option_strings or default is None or default is False or default == []:
            continue
        if default == argparse.SUPPRESS:
            continue
        shown = formatter._get_help_string(action) or ""
        assert action.help and "default" in shown.lower(), f"{command} {action.option_strings}: {shown!r}"


def test_ctrl_c_while_the_command_is_imported_is_one_line_and_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(name: str) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(console.importlib, "import_module", interrupted)
    assert console.run_module("experiments.plan", ["--gpus", "8"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
