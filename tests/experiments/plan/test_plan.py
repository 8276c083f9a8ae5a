"""experiments.plan: the table, JSON and CSV, --out, bad input and Ctrl-C."""

from __future__ import annotations

import json
import os
import re
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
from tests.goldens import assert_golden
from tests.paths import REPO

# The data-parallel space (fast path: quick); PARALLEL adds a small tensor x pipeline space.
SMALL = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8,16", "--global-batch", "128",
         "--max-micro-batch", "4", "--max-tp", "1", "--max-pp", "1", "--recompute", "both", "--workers", "1",
         "--quiet"]  # fmt: skip
# Llama-2-7B on one node of 24 GB A10Gs: pure data parallelism needs FSDP and loses to tp2 x pp2.
GOLDEN = ["--model", "llama2-7b", "--seq-len", "1024", "--cluster", "g5.48xlarge", "--gpus", "8",
          "--global-batch", "16", "--strategies", "zero1,fsdp", "--micro-batches", "1", "--recompute",
          "none,full", "--max-tp", "2", "--max-pp", "2", "--max-vpp", "1", "--schedules", "1f1b",
          "--offload", "none", "--workers", "1", "--quiet"]  # fmt: skip
_WALL = re.compile(r"evaluated in [0-9.]+ s \(([^;]+); [0-9]+ per s\)")


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
    skipped = document.get("configs_skipped_by_bound", 0)  # listed only when some were
    assert skipped == sum(c.get("skipped_by_bound", 0) for c in document["gpu_counts"])
    assert (
        document["configs_considered"] == document["configs_evaluated"] + document["configs_pruned"] + skipped
    )
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
    assert "already holds files; choose a new folder, or add --force" in capsys.readouterr().err
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
        (["--top", "0"], "--top: 0 is out of range; allowed 1..10000"),
        (["--max-tp", "0"], "--max-tp: 0 is out of range; allowed 1..65536"),
        (["--max-pp", "0"], "--max-pp: 0 is out of range"),
        (["--max-cp", "-2"], "--max-cp: -2 is out of range"),
        (["--max-ep", "0"], "--max-ep: 0 is out of range"),
        (["--max-vpp", "0"], "--max-vpp: 0 is out of range"),
        (["--tp", "2"], "--tp 2 contradicts --max-tp 1"),
        (["--max-tp", "8", "--tp", "5"], "--tp 5: attention heads (12) are not divisible by tp (5)"),
        (
            ["--max-pp", "8", "--pp", "5"],
            "--pp 5: the model's 12 blocks do not divide into 5 equal pipeline stages",
        ),
        (["--max-tp", "8", "--tp", "two"], "--tp: expected a whole number, got 'two'"),
        (["--max-ep", "2", "--ep", "2"], "--ep 2: ep 2 needs a mixture-of-experts model"),
        (
            ["--max-tp", "8", "--tp", "4", "--gpus", "2"],
            "2 GPUs: tp x pp x cp = 4 x 1 x 1 does not divide 2 GPUs",
        ),
        (["--recompute", "sometimes"], "recompute 'sometimes' not understood"),
        (
            ["--max-pp", "4", "--pp", "4", "--vpp", "2"],
            "the 12 blocks do not divide into pp x vpp = 4 x 2 interleaved stages",
        ),
        (["--offload", "disk"], "--offload: 'disk' is not known"),
        (["--schedules", "zb-v"], "--schedules: 'zb-v' is not known"),
        (["--sequence-parallel", "maybe"], "--sequence-parallel"),
        (["--ring-kv", "all"], "--ring-kv: invalid choice: 'all' (choose from 'grouped', 'repeated')"),
        (["--ring-merge", "x"], "--ring-merge: invalid choice: 'x' (choose from 'fused', 'eager')"),
        (["--pipeline-strategies", "ps-async"], "synchronous strategies only; 'ps-async'"),
        (
            ["--max-pp", "2", "--pp", "2", "--strategies", "zero3", "--pipeline-strategies", "ddp"],
            "8 GPUs: pipelines run with ddp only (--pipeline-strategies)",
        ),
        (
            [
                "--model",
                "llama2-70b",
                "--cluster",
                "g5.12xlarge",
                "--gpus",
                "4",
                "--global-batch",
                "4",
                "--offload",
                "none",
            ],
            "the search space is empty: 4 GPUs: no layout fits (smallest memory floor",
        ),
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


def _masked(table: str) -> str:
    """The table without its wall-clock time and rate (they vary from run to run)."""
    return _WALL.sub(r"evaluated in <wall> s (\1; <rate> per s)", table)


def test_golden_plan_where_tensor_and_pipeline_parallelism_win(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(GOLDEN, capsys)
    assert code == 0
    assert "not in this build's step model" not in out
    best = out.split("   1 ", 1)[1].split()[:4]
    assert best[:3] == ["zero1", "dp2", "tp2"] and best[3] == "pp2"  # the winner is a 3-D layout
    assert "deciding: exposed communication" in out and "best pure data-parallel layout fsdp mb=1" in out
    assert_golden("plan_llama2_7b_g5_tp_pp.txt", _masked(out))


def test_layout_degrees_in_json_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([*GOLDEN, "--format", "json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["search"]["tp"] == [1, 2] and document["search"]["pp"] == [1, 2]
    best = document["gpu_counts"][0]["ranked"][0]
    assert best["layout"]["label"] == "zero1 dp2 tp2 pp2 mb=1 sp"
    assert (best["layout"]["dp"], best["layout"]["tp"], best["layout"]["pp"]) == (2, 2, 2) == (
        best["dp"], best["tp"], best["pp"])  # fmt: skip
    assert best["pipeline_bubble_fraction"] > 0
    code, out, _ = _run([*GOLDEN, "--format", "csv"], capsys)
    header, first, *_ = out.strip().splitlines()
    row = dict(zip(header.split(","), first.split(","), strict=False))
    assert row["layout.label"] == "zero1 dp2 tp2 pp2 mb=1 sp" and row["layout.vpp"] == "1"
    assert row["layout.schedule"] == "1f1b" and row["layout.sequence_parallel"] == "True"


@pytest.mark.parametrize(
    ("extra", "seen"),
    [
        (["--max-tp", "2"], "tp 1/2"),
        (["--max-pp", "2"], "pp 1/2"),
        (["--max-pp", "4", "--max-vpp", "2"], "vpp 1/2"),
        (["--max-cp", "2"], "cp 1/2"),
        (["--max-tp", "4", "--tp", "4"], "tp 4"),
        (["--max-pp", "2", "--pp", "2", "--schedules", "gpipe"], "schedule gpipe"),
        (["--max-tp", "2", "--sequence-parallel", "both"], "sp off/on"),
        (["--recompute", "selective"], "recompute selective"),
        (["--max-pp", "2", "--pp", "2", "--strategies", "fsdp", "--pipeline-strategies", "fsdp"], "pp 2"),
        (["--offload", "optimizer"], "offload optimizer"),
    ],
)
def test_each_space_flag_reaches_the_search(
    extra: list[str], seen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*SMALL, "--gpus", "8", "--strategies", "ddp", "--micro-batches", "4"]
    code, out, _ = _run([*argv, *extra], capsys)
    assert code == 0
    assert seen in out.splitlines()[2]


def test_count_lays_out_the_search_without_timing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.plan import run

    monkeypatch.setattr(run, "time_tasks", lambda *a, **k: pytest.fail("--count must not time anything"))
    code, out, _ = _run([*GOLDEN, "--count"], capsys)
    assert code == 0
    assert out.splitlines()[1:] == [
        # the 4 layouts the golden plan times and finds out of memory are above their floors too
        "     8 GPUs: 12 layouts, 6 skipped untimed, 6 to evaluate (offload variants included)",
        "total: 12 layouts, 6 to evaluate",
    ]


@pytest.mark.parametrize(
    ("extra", "seen"),
    [
        (["--pp", "2"], " x pp 2 x "),
        (["--pp", "2", "--vpp", "2"], " x vpp 2 x "),
        (["--cp", "2"], " x cp 2 x "),
        (["--max-cp", "4"], " x cp 1/2/4 x "),
        (["--model", "mixtral-8x7b", "--seq-len", "1024", "--max-ep", "4"], " x ep 1/2/4 x "),
        (["--model", "mixtral-8x7b", "--seq-len", "1024", "--ep", "8"], " x ep 8 x "),
        (["--model", "mixtral-8x7b", "--seq-len", "1024"], " x ep 1/2/4/8 x "),
        (["--model", "llama2-7b", "--seq-len", "16384"], " x cp 1/2/4/8 x "),
        (["--max-tp", "16"], "strategy (6) x micro-batch x tp 1/2/4 x "),  # 8 and 16 do not divide 12 heads
    ],
)
def test_degree_flags_reach_the_search(
    extra: list[str], seen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        ["--model", "gpt2-small", "--gpus", "8,16", "--global-batch", "64", "--count", *extra], capsys
    )
    assert code == 0
    assert seen in out.splitlines()[0]


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
    from simcore.planner import search

    real = search.run_sweep

    def interrupted(job, tasks, **kwargs):
        done = real(job, tasks[:3], **kwargs)
        return SweepRun([*done.outcomes, *([None] * (len(tasks) - 3))], True, done.engine, done.workers)

    monkeypatch.setattr(search, "run_sweep", interrupted)
    code, out, err = _run(SMALL, capsys)
    assert code == 130
    assert "interrupted: 3 of" in err
    assert "3 evaluated" in out


def test_cli_lists_what_simcore_allows() -> None:
    assert cli.ENGINES == ENGINES
    assert cli.ENGINE_PATHS == ENGINE_PATHS
    assert list(cli.STRATEGIES) == strategy_names()
    # the light parser's literal copies (--help imports neither simcore's fp8 nor the framework readers)
    from experiments.common.frameworks.emit import EMITTERS
    from experiments.common.frameworks.flags import FRAMEWORK_NAMES
    from experiments.common.frameworks.settings import FRAMEWORKS
    from experiments.plan.args import FP8_RECIPES
    from simcore.compute.fp8 import FP8_RECIPES as SIMCORE_FP8

    assert FP8_RECIPES == SIMCORE_FP8
    from experiments.plan.args import RING_KV
    from simcore.parallel.cp import RING_KV as SIMCORE_RING_KV

    assert RING_KV == SIMCORE_RING_KV
    from experiments.plan.args import MAX_MICRO_BATCH
    from simcore.planner.space import MAX_MICRO_BATCH as SPACE_MAX

    assert MAX_MICRO_BATCH == SPACE_MAX
    assert FRAMEWORK_NAMES == FRAMEWORKS == tuple(EMITTERS)


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


def test_compile_plans_a_faster_best_layout(capsys: pytest.CaptureFixture[str]) -> None:
    eager = json.loads(_run([*SMALL, "--format", "json", "--top", "1"], capsys)[1])
    fused = json.loads(_run([*SMALL, "--format", "json", "--top", "1", "--compile"], capsys)[1])
    best = [g["ranked"][0]["tokens_per_s"] for g in eager["gpu_counts"]]
    best_fused = [g["ranked"][0]["tokens_per_s"] for g in fused["gpu_counts"]]
    assert all(f > e for f, e in zip(best_fused, best, strict=True))


def test_ring_kv_is_recorded_in_the_search(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, want in (([], "grouped"), (["--ring-kv", "repeated"], "repeated")):
        code, out, _ = _run([*SMALL, "--format", "json", "--top", "1", *argv], capsys)
        assert code == 0 and json.loads(out)["search"]["ring_kv"] == want


def test_ring_merge_is_recorded_in_the_search(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, want in (([], "fused"), (["--ring-merge", "eager"], "eager")):
        code, out, _ = _run([*SMALL, "--format", "json", "--top", "1", *argv], capsys)
        assert code == 0 and json.loads(out)["search"]["ring_merge"] == want


def test_the_plans_ring_merge_choices_are_simcores() -> None:
    from experiments.plan.args import RING_MERGES
    from simcore.parallel.cp import RING_MERGES as SIMCORE_RING_MERGES

    assert RING_MERGES == SIMCORE_RING_MERGES
