"""``python -m experiments.staleness_accuracy``: golden tables, bad input, graceful (b), report files,
the verdict logic, and the penalty study that writes the coefficients file.

Regenerate the golden tables with ``TRAINSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_staleness_accuracy.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.staleness_accuracy.cli import main
from experiments.staleness_accuracy.predicted import predicted_update_time_s
from experiments.staleness_accuracy.report import StepTimes, SummaryRow, verdict
from experiments.staleness_accuracy.simulated import time_basis
from simcore.staleness.penalty import estimate_accuracy_penalty
from tests.goldens import assert_golden


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def measured_file(directory: Path) -> Path:
    """A calibrate.train-style JSONL file: server step records with the staleness they applied."""
    path = directory / "ps_async.jsonl"
    steps = [[0, 1, 2, 3], [2, 3, 3, 4], [1, 3, 3, 9]]
    lines = [
        {"kind": "step", "role": "server", "rank": 0, "step": i, "staleness": s} for i, s in enumerate(steps)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_quick_table_is_golden(capsys: pytest.CaptureFixture[str]) -> None:
    """What CI runs: digits, fixed delays 0, 2, 8, async and mitigated, 2 seeds."""
    assert_golden("staleness_accuracy_quick.txt", run_cli(capsys, "--quick"))


def test_gaussian_with_measured_staleness_and_step_times_is_golden(capsys, tmp_path) -> None:
    out = run_cli(
        capsys, "--quick", "--dataset", "gaussian", "--delays", "0,4", "--measured", str(measured_file(tmp_path)),
        "--step-time", "sync=100ms", "--step-time", "ps-async=72ms", "--step-time", "mitigated=0.11",
    )  # fmt: skip
    assert_golden("staleness_accuracy_gaussian_measured.txt", out)
    assert "async meas:ps_async" in out and "time unit: s" in out


def test_same_arguments_same_output(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--quick", "--dataset", "gaussian", "--delays", "0,3", "--seeds", "1", "--epochs", "2")
    assert run_cli(capsys, *args) == run_cli(capsys, *args)


def test_cluster_runs_b_with_simulated_times(capsys: pytest.CaptureFixture[str]) -> None:
    """(b): one row per simulated mode and bound, the time basis and the staleness source stated."""
    out = run_cli(
        capsys, "--quick", "--dataset", "gaussian", "--delays", "0", "--seeds", "1", "--epochs", "1",
        "--cluster", "dgx-a100", "--gpus", "4", "--ps-modes", "async,ssp,mitigated", "--staleness-bounds", "1,2",
    )  # fmt: skip
    names = [line.split("  ")[0] for line in out.splitlines() if line.startswith("pred ")]
    assert names == ["pred async", "pred ssp s=1", "pred ssp s=2", "pred mitigated"]
    assert (
        "time basis: simulated seconds per applied gradient on dgx-a100, 4 GPUs (trainsim parameter-server"
        in out
    )
    assert (
        "time unit: s" in out
        and "(b) staleness of the pred rows: trainsim parameter-server simulation" in out
    )
    assert "verdict per PS mode on dgx-a100, 4 GPUs against sync:" in out
    rows = {line.split("  ")[0]: line.split()[-3:] for line in out.splitlines() if line.startswith("pred ")}
    same = [s for s in ("1", "2") if rows[f"pred ssp s={s}"] == rows["pred async"]]
    # the note appears exactly when SSP's gate never blocked (its rows then equal async's)
    assert (f"(b) SSP s={','.join(same)} predicts exactly async's staleness" in out) == bool(same)
    sync_time = predicted_update_time_s("dgx-a100", "sync", None, 4, 0)
    sync_line = next(line for line in out.splitlines() if line.startswith("sync "))
    assert f"{sync_time:.3g}" in sync_line.split()


def test_step_time_overrides_a_simulated_mode(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(
        capsys, "--quick", "--dataset", "gaussian", "--delays", "0,2", "--modes", "async", "--seeds", "1",
        "--epochs", "1", "--cluster", "dgx-a100", "--gpus", "2", "--ps-modes", "async", "--step-time", "async=9s",
    )  # fmt: skip
    assert "; --step-time for async" in out
    for name in ("async d=2", "pred async"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "9" in line.split()[-2:], line  # t/update column (time is "-" or updates x 9)


def test_time_basis_without_cluster_is_the_paper_or_the_given_times() -> None:
    paper = time_basis(None, 8, [], {})
    assert paper.unit == "x sync update" and paper.label == "seed study ratios"
    given = time_basis(None, 8, [], {"sync": 0.1})
    assert (given.unit, given.of("sync"), given.of("async")) == ("s", 0.1, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--modes", "hogwild"], "--modes: unknown mode 'hogwild'; allowed: async, mitigated"),
        (["--modes", "ssp"], "--modes: unknown mode 'ssp'; allowed: async, mitigated"),
        (["--delays", "0,-2"], "--delays: -2 is out of range; allowed 0..1000"),
        (["--delays", "a,b"], "--delays: expected a whole number, got 'a'"),
        (["--delays", "-1"], "--delays: -1 is out of range"),
        (["--epochs", "1000", "--seeds", "100"], "this would train"),
        (["--measured", "no/such/file.jsonl"], "measured staleness file not found"),
        (["--step-time", "async"], "--step-time: expected MODE=TIME"),
        (["--step-time", "turbo=1s"], "unknown parameter-server mode 'turbo'"),
        (["--step-time", "async=0s"], "time per update must be > 0"),
        (["--step-time", "async=-1s"], "error: time"),
        (["--dataset", "mnist"], "--dataset: invalid choice: 'mnist'"),
        (["--seeds", "0"], "--seeds: 0 is out of range"),
        (["--lr", "0"], "--lr: 0 is out of range; allowed 1e-12..1e+06"),
        (["--lr", "nan"], "--lr: 'nan' is not a finite number"),
        (["--target", "97"], "--target: expected an accuracy between 0 and 1"),
    ],
)
def test_bad_input_is_one_error_line_and_status_2(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err


def test_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # the same words, whatever the terminal's width
    assert "--cluster" in out and "--step-time MODE=TIME" in out and "97% of sync's final" in out


def test_an_existing_penalty_file_is_kept_without_force(tmp_path, capsys) -> None:
    path = tmp_path / "penalty.json"
    path.write_text("{}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--fit-penalty", str(path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --fit-penalty") and path.read_text() == "{}\n"


@pytest.mark.slow
def test_out_writes_report_results_and_plots(capsys, tmp_path) -> None:
    args = [
        "--quick",
        "--dataset",
        "gaussian",
        "--delays",
        "0,3",
        "--seeds",
        "2",
        "--epochs",
        "2",
        "--out",
        str(tmp_path),
    ]
    run_cli(capsys, *args)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert (
        "## The seed study beside this one" in report
        and "arXiv 2505.12832" in report
        and "up to 28%" in report
        and "4% to 17%" in report
    )
    assert "Bayes error" in report
    rows = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["rows"]
    assert [r["name"] for r in rows] == ["sync", "async d=3", "mitigated d=3"]
    for name in ("accuracy_curves.png", "penalty_vs_staleness.png", "time_to_accuracy.png"):
        assert (tmp_path / name).stat().st_size > 1000


def row(
    name: str,
    mode: str,
    t_update: float | None,
    t_target: float | None,
    reached: int = 3,
    penalty: float = 1.0,
) -> SummaryRow:
    updates = None if t_target is None or t_update is None else t_target / t_update
    return SummaryRow(
        name=name, family="sync" if mode == "sync" else "fixed", mode=mode, mean_staleness=2.0, p99_staleness=2,
        accuracy_mean=0.9, accuracy_std=0.0, penalty_points=penalty, seeds=3, reached=reached, diverged=0,
        updates_to_target=updates, epochs_to_target=None, time_per_update=t_update, time_to_target=t_target,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (row("a", "async", 0.72, 80.0), "both better"),
        (row("a", "async", 0.72, 120.0), "faster per step, slower to accuracy"),
        (row("a", "async", 0.72, None, reached=1), "faster per step, misses target (1/3 seeds)"),
        (row("m", "mitigated", 1.2, 130.0), "both worse"),
        (row("m", "mitigated", 1.0, 130.0), "same per step, slower to accuracy"),
        (row("a", "async", None, None), "step time unknown, time to accuracy unknown"),
    ],
)
def test_verdict_combines_step_time_and_time_to_accuracy(candidate: SummaryRow, expected: str) -> None:
    sync = row("sync", "sync", 1.0, 100.0, penalty=0.0)
    assert verdict(candidate, sync).startswith(expected)
    assert verdict(candidate, sync).endswith("final accuracy -1.00 pts")


def test_step_times_lookup() -> None:
    assert StepTimes({"sync": 1.0}).of("async") is None


def test_penalty_study_writes_usable_coefficients(capsys, tmp_path) -> None:
    """The --fit-penalty path end to end on a tiny budget; the file it writes drives the estimate."""
    path = tmp_path / "penalty.json"
    assert main(["--fit-penalty", str(path), "--dataset", "gaussian", "--seeds", "1", "--epochs", "1"]) == 0
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["provenance"]["command"].startswith("python -m experiments.staleness_accuracy --fit-penalty")
    assert {"date", "machine"} <= set(data["provenance"])
    for mode in ("async", "mitigated"):
        knots = data["fits"][mode]["knots"]
        assert knots[0] == {"staleness": 0.0, "penalty_points": 0.0, "updates_to_target_factor": 1.0}
        penalties = [k["penalty_points"] for k in knots]
        assert penalties == sorted(penalties)
        assert 0.0 <= data["fits"][mode]["alpha_mean"] <= 1.0
    estimate = estimate_accuracy_penalty(3.0, 6.0, coefficients_path=path)
    assert estimate["penalty_points"] >= 0.0
    assert "alpha_mean" in capsys.readouterr().out
