"""The templates' preflight: a job's own argument errors, once, before any rank starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.slurm import preflight

pytest.importorskip("torch", reason="the preflight imports the torch calibration jobs")


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        preflight.main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_unknown_job_names_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(["calibrate.colectives", "--out", "x"], capsys)
    assert err == (
        "error: JOB='calibrate.colectives' is not a calibration job; allowed: "
        "calibrate.collectives, calibrate.compute, calibrate.train\n"
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["calibrate.collectives", "-b", "8", "-e", "4"], "error: sizes: need 1 <= -b (8) <= -e (4)\n"),
        (["calibrate.train", "--steps", "0"], "error: --steps: 0 is out of range; allowed 1..10000000\n"),
        (["calibrate.compute", "--repeats", "0"], "error: "),
    ],
)
def test_bad_arguments_give_the_jobs_own_error(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _fails([argv[0], "--out", str(tmp_path / "out"), *argv[1:]], capsys)
    assert err.startswith(error) and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("job", sorted(preflight.JOBS))
def test_good_arguments_measure_nothing(job: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / ("train.jsonl" if job == "calibrate.train" else "runs")
    assert preflight.main([job, "--out", str(out)]) == 0  # capfd: the training job's watchdog needs an fd
    assert capfd.readouterr() == ("", "") and not out.exists()


def test_no_job_is_a_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _fails([], capsys).startswith("error: usage: python -m calibrate.slurm.preflight JOB")
