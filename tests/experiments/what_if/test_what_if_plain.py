"""The plain what-if (no --from, no --out) runs without the framework readers, plots or the page,
prints what the full entry prints, and is what ``python -m experiments.what_if`` dispatches to."""

from __future__ import annotations

import pytest

from experiments.console import COMMANDS, _main_module
from experiments.what_if import cli, plain
from tests.fresh_imports import imported_by

SMALL = ["--gpus", "2", "--strategies", "ddp,zero3", "--model", "gpt2-small", "--global-batch", "8"]


@pytest.mark.parametrize(
    ("argv", "handled"),
    [
        (SMALL, True),
        ([*SMALL, "--out", "somewhere"], False),
        ([*SMALL, "--ou", "somewhere"], False),  # argparse takes the abbreviation as --out
        ([*SMALL, "--from", "megatron", "--num-layers 2"], False),
        ([*SMALL, "--fro", "megatron", "--num-layers 2"], False),  # and this one as --from
        ([*SMALL, "--gpus", "x"], False),  # the full entry reports the error, as it always did
    ],
)
def test_plain_handles_runs_without_from_or_out(argv: list[str], handled: bool) -> None:
    assert plain.handles(argv) is handled
    assert _main_module(COMMANDS["what-if"], argv) == (
        "experiments.what_if.plain" if handled else "experiments.what_if.cli"
    )


def test_plain_prints_what_the_full_entry_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(SMALL) == 0
    full = capsys.readouterr()
    assert plain.main(SMALL) == 0
    assert capsys.readouterr() == full


def test_a_plain_run_imports_no_framework_reader_plot_or_page() -> None:
    code = (
        "import io, sys, contextlib\n"
        f"sys.argv = ['what_if', *{SMALL!r}]\n"
        "from experiments.console import run_module\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert run_module('experiments.what_if') == 0\n"
    )
    heavy = ("experiments.common.frameworks.wiring", "experiments.report_html.page",
             "experiments.what_if.plots", "experiments.what_if.cli", "networkx")  # fmt: skip
    assert imported_by(code, heavy) == []
