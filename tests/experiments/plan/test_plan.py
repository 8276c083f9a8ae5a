"""experiments.plan: the table, JSON and CSV, --out, bad input and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.plan import cli
from experiments.plan.cli import main
from simcore.fastpath.path import ENGINE_PATHS
from simcore.planner.executors import ENGINES, SweepRun
from simcore.report import RECORD_FIELDS
from simcore.strategies import strategy_names
from tests.paths import REPO

SMALL = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8,16", "--global-batch", "128",
         "--max-micro-batch", "4", "--workers", "1", "--quiet"]  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table_ranks_every_gpu_count_and_draws_the_frontiers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([*SMALL, "--price-per-gpu-hour", "2", "--top", "3"], capsys)
    assert code == 0
    assert out.startswith("plan for gpt2-small")
    assert "configurations:" in out and "evaluated in" in out
    for gpus in (8, 16):
        assert f"\n{gpus} GPUs (" in out
    assert out.count("  why: ") == 2
    assert "Pareto frontier, throughput vs GPUs" in out
    assert "Pareto frontier, throughput vs cost (no other best" in out
    assert "$/M tok" in out


def test_json_holds_the_counts_and_what_if_records(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([*SMALL, "--format", "json", "--top", "2"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["schema"] == "trainsim-plan" and document["version"] == 1
    assert document["configs_evaluated"] == sum(c["evaluated"] for c in document["gpu_counts"]) > 0
    assert document["configs_considered"] == document["configs_evaluated"] + document["configs_pruned"]
    for count in document["gpu_counts"]:
        assert [r["rank"] for r in count["ranked"]] == [1, 2]
        for record in count["ranked"]:
            assert set(RECORD_FIELDS) <= set(record)
            assert record["layout"]["strategy"] == record["strategy"]
            assert record["gpus"] == count["gpus"]
        speeds = [r["tokens_per_s"] for r in count["ranked"]]
        assert speeds == sorted(speeds, reverse=True)
    assert document["pareto_gpus"]


def test_csv_has_one_row_per_ranked_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([*SMALL, "--format", "csv", "--top", "2"], capsys)
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert "layout.strategy" in header.split(",") and "rank" in header.split(",")
    assert len(rows) == 4


def test_out_writes_the_plot_and_refuses_a_full_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    code, _, err = _run([*SMALL, "--out", str(out), "--price-per-gpu-hour", "1.5"], capsys)
    assert code == 0
    assert (out / "pareto.png").stat().st_size > 0
    assert json.loads((out / "plan.json").read_text())["schema"] == "trainsim-plan"
    assert "wrote" in err
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, "--out", str(out)])
    assert exit_info.value.code == 2
    assert "is not empty; give an empty directory or add --force" in capsys.readouterr().err
    assert main([*SMALL, "--out", str(out), "--force"]) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpus", "24"], "the search space is empty: 24 GPUs"),
        (["--tokens-per-step", "1Mi"], "contradicts --tokens-per-step"),
        (["--tokens-per-step", "1M"], "not a whole number of sequences of 1024 tokens"),
        (["--max-cost", "100", "--train-tokens", "1B"], "--max-cost needs --price-per-gpu-hour"),
        (["--max-hours", "10"], "need the length of the run"),
        (["--engine", "dask"], "engine 'dask' is not known"),
        (["--address", "127.0.0.1:9"], "needs --engine ray"),
        (["--engine-path", "quick"], "engine path 'quick' is not known"),
        (["--strategies", "ps-async"], "synchronous strategies only"),
        (["--micro-batches", "3"], "the search space is empty"),
        (["--memory-headroom", "100%"], "--memory-headroom"),
        (["--gpus", "64..8"], "--gpus: range"),
        (["--top", "0"], "--top must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_ray_missing_or_unreachable_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, "--engine", "ray", "--address", "127.0.0.1:9"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert ("cannot reach the Ray cluster at 127.0.0.1:9" in err) or ("needs Ray" in err)
    from simcore.planner import executors

    monkeypatch.setattr(executors.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit):
        main([*SMALL, "--engine", "ray"])
    assert "pip install 'trainsim[sweep]'" in capsys.readouterr().err


def test_ctrl_c_prints_what_finished(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.plan import run

    real = run.run_sweep

    def interrupted(job, tasks, **kwargs):  # type: ignore[no-untyped-def]
        done = real(job, tasks[:3], **kwargs)
        return SweepRun([*done.outcomes, *([None] * (len(tasks) - 3))], True, done.engine, done.workers)

    monkeypatch.setattr(run, "run_sweep", interrupted)
    code, out, err = _run(SMALL, capsys)
    assert code == 130
    assert "interrupted: 3 of" in err
    assert "3 evaluated" in out


def test_cli_lists_what_simcore_allows() -> None:
    assert cli.ENGINES == ENGINES
    assert cli.ENGINE_PATHS == ENGINE_PATHS
    assert list(cli.STRATEGIES) == strategy_names()


def _children(pid: int) -> list[str]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to see the pool's workers")
def test_ctrl_c_stops_the_process_pool_at_once() -> None:
    """SIGINT to the process group (a terminal's Ctrl-C) mid-sweep: exit 130, what finished printed."""
    command = [sys.executable, "-m", "experiments.plan", "--model", "gpt2-xl", "--gpus", "8..1024",
               "--workers", "2", "--quiet"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while len(_children(process.pid)) < 2 and time.monotonic() < deadline:  # the pool has started
        time.sleep(0.1)
    time.sleep(2)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert out.startswith("plan for gpt2-xl") and "evaluated in" in out
    assert err.strip().splitlines()[-1].startswith("interrupted: ")
