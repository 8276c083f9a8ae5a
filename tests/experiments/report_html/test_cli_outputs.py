"""``--out DIR`` of the four commands writes ``DIR/report.html`` from the records of their JSON; a bad
``--out`` (a file, a folder holding another run's report, a place this user cannot write) is one
error line, exit 2, and nothing is overwritten."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from experiments.nccl_sim.cli import main as nccl_main
from experiments.plan.cli import main as plan_main
from experiments.validate_published.cli import main as published_main
from experiments.what_if.cli import main as whatif_main
from tests.experiments.report_html.docs import NCCL_LOG
from tests.experiments.report_html.html_parts import read

Main = Callable[[list[str]], Any]
NCCL = ["--gpus", "8", "-b", "1K", "-e", "1M", "-f", "4"]
WHATIF = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "2", "--strategies", "ddp", "--quiet"]
PLAN = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "64",
        "--max-micro-batch", "2", "--max-tp", "1", "--max-pp", "1", "--strategies", "ddp,fsdp",
        "--workers", "1", "--quiet"]  # fmt: skip
PUBLISHED = ["--quick", "--category", "collective_small"]
UNWRITABLE = "/proc/trainsim-report"  # /proc takes no new folders, even from root


def _page(out: Path) -> Any:
    return read((out / "report.html").read_text(encoding="utf-8"))


def _fails(capsys: pytest.CaptureFixture[str], main: Main, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


def test_nccl_sim_page_is_its_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert nccl_main([*NCCL, "--out", str(out), "--compare", str(NCCL_LOG)]) == 0
    document = json.loads((out / "nccl_sim.json").read_text(encoding="utf-8"))
    assert _page(out).data == document
    assert document["measured"]["source"] == NCCL_LOG.name and document["measured"]["rows"]
    assert {a["algorithm"] for a in document["alternatives"]} == {"ring", "tree", "direct"}
    err = capsys.readouterr().err
    assert f"wrote {out / 'report.html'}" in err


def test_nccl_sim_json_stdout_matches_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert nccl_main([*NCCL, "--format", "json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "nccl_sim.json").read_text(encoding="utf-8"))
    assert {k: written[k] for k in printed} == printed  # the file adds alternatives, notes, measured
    assert written["measured"] is None


def test_nccl_sim_compare_needs_out_and_the_ops_rows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert "give --out DIR too" in _fails(capsys, nccl_main, [*NCCL, "--compare", str(NCCL_LOG)])
    broadcast = NCCL_LOG.with_name("broadcast_perf_8xa100.txt")
    err = _fails(capsys, nccl_main, [*NCCL, "--compare", str(broadcast), "--out", str(tmp_path / "x")])
    assert "no out-of-place all_reduce rows (it holds: broadcast)" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "main, argv",
    [(nccl_main, NCCL), (whatif_main, WHATIF), (plan_main, PLAN), (published_main, PUBLISHED)],
    ids=["nccl_sim", "what_if", "plan", "validate_published"],
)
def test_bad_out_is_one_line_and_overwrites_nothing(
    main: Main, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("mine", encoding="utf-8")
    assert "file" in _fails(capsys, main, [*argv, "--out", str(a_file)])
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "report.html").write_text("another run's report", encoding="utf-8")
    err = _fails(capsys, main, [*argv, "--out", str(previous)])
    assert "--force" in err
    assert (previous / "report.html").read_text(encoding="utf-8") == "another run's report"
    if sys.platform.startswith("linux"):
        assert "cannot write" in _fails(capsys, main, [*argv, "--out", UNWRITABLE])
    assert a_file.read_text(encoding="utf-8") == "mine"


@pytest.mark.slow
def test_what_if_page_holds_the_json_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert whatif_main([*WHATIF, "--format", "json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    data = _page(out).data
    assert {k: data[k] for k in printed} == printed
    assert [t["label"] for t in data["timelines"]] == ["ddp"] and data["timelines"][0]["spans"]


@pytest.mark.slow
def test_plan_page_is_plan_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert plan_main([*PLAN, "--out", str(out)]) == 0
    page = _page(out)
    assert page.data == json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert any("data-layout" in m for m in page.marks)


@pytest.mark.slow
def test_validate_published_page_is_comparison_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert published_main([*PUBLISHED, "--out", str(out)]) == 0
    page = _page(out)
    assert page.data == json.loads((out / "comparison.json").read_text(encoding="utf-8"))
    assert page.data["provenance"]["command"] in " ".join(page.text)


@pytest.mark.slow
def test_default_what_if_page_is_at_most_two_megabytes(tmp_path: Path) -> None:
    # The bound for the default run (2 clusters x 10 strategies, 12 timelines): ~1.3 MB now.
    assert whatif_main(["--gpus", "16", "--quiet", "--format", "csv", "--out", str(tmp_path / "run")]) == 0
    page = tmp_path / "run" / "report.html"
    assert 500_000 < page.stat().st_size <= 2 * 2**20
    assert len(_page(tmp_path / "run").data["timelines"]) == 12
