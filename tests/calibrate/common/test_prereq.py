"""What a calibration job checks before it touches anything: torch, its output, the writing rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.common import prereq
from calibrate.common.launch import launch_rank
from simcore.errors import TrainsimError
from tests.paths import REPO


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_new_or_empty_folder_is_fine_and_not_created(tmp_path: Path) -> None:
    assert prereq.check_measurement_dir(str(tmp_path / "new"), ["a.jsonl"], resume=False, force=False)
    assert prereq.check_measurement_dir(str(tmp_path), ["a.jsonl"], resume=False, force=False) == tmp_path
    assert _tree(tmp_path) == []


def test_other_files_and_empty_record_files_are_not_earlier_measurements(tmp_path: Path) -> None:
    (tmp_path / "compute.jsonl").write_text('{"kind": "provenance"}\n')  # another job's records
    (tmp_path / "collectives.jsonl").write_text("")
    assert prereq.check_measurement_dir(str(tmp_path), ["collectives.jsonl"], resume=False, force=False)


def test_a_folder_with_the_jobs_records_needs_resume_or_force(tmp_path: Path) -> None:
    (tmp_path / "collectives.jsonl").write_text('{"kind": "provenance"}\n')
    with pytest.raises(TrainsimError) as exc:
        prereq.check_measurement_dir(
            str(tmp_path), ["collectives.jsonl", "collectives.csv"], resume=False, force=False
        )
    assert str(exc.value) == (
        f"--out {str(tmp_path)!r} already holds earlier measurements (collectives.jsonl); add --resume to "
        "measure only what they lack, --force to add a new measurement to them, or choose a new folder"
    )
    for resume, force in ((True, False), (False, True)):
        assert prereq.check_measurement_dir(str(tmp_path), ["collectives.jsonl"], resume=resume, force=force)


@pytest.mark.parametrize("kind", ["dir", "record"])
def test_wrong_kind_or_unwritable_places_are_refused(kind: str, tmp_path: Path) -> None:
    a_file, a_folder = tmp_path / "f.txt", tmp_path / "d"
    a_file.write_text("x")
    a_folder.mkdir()
    if kind == "dir":
        cases = {
            str(a_file): "is an existing file",
            str(a_file / "sub"): "is a file, so the folder cannot be made",
        }
    else:
        cases = {str(a_folder): "is a folder; give the file to write"}
    cases["/proc/no/such/place"] = "cannot write in '/proc'"
    for out, message in cases.items():
        with pytest.raises(TrainsimError, match=message):
            if kind == "dir":
                prereq.check_measurement_dir(out, ["x.jsonl"], resume=True, force=True)
            else:
                prereq.check_record_file(out, resume=True, force=True)
    assert _tree(tmp_path) == ["d", "f.txt"]


def test_a_record_file_holding_records_needs_resume_or_force(tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    assert prereq.check_record_file(str(out), resume=False, force=False) == out and not out.exists()
    out.write_text('{"kind": "provenance"}\n')
    with pytest.raises(TrainsimError, match="already holds earlier records; add --resume to continue them"):
        prereq.check_record_file(str(out), resume=False, force=False)
    assert prereq.check_record_file(str(out), resume=True, force=False) == out
    assert prereq.check_record_file(str(out), resume=False, force=True) == out


def test_the_rank_comes_from_torchrun_or_slurm_or_is_zero() -> None:
    assert launch_rank({}) == 0
    assert launch_rank({"RANK": "3", "WORLD_SIZE": "4"}) == 3
    assert launch_rank({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}) == 5


def test_missing_torch_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereq.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TrainsimError, match=r"calibrate\.x measures with torch, which is not installed"):
        prereq.require_torch("calibrate.x")


_WITHOUT_TORCH = (
    "import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1], *sys.argv[2:]]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["calibrate.collectives", "--out", "x"], "calibration jobs need torch"),
        (["calibrate.compute", "--out", "x"], "calibration jobs need torch"),
        (["calibrate.memory_truth", "--out", "x.jsonl"], "calibration jobs need torch"),
        (["calibrate.train", "--out", "x.jsonl"], "calibrate.train measures with torch"),
        (["calibrate.train", "--out", "x.jsonl", "--steps", "0"], "--steps: 0 is out of range"),
        (
            ["calibrate.slurm.preflight", "calibrate.compute", "--out", "x"],
            "calibrate.compute measures with torch",
        ),
    ],
)
def test_without_torch_the_jobs_say_so_in_one_line(argv: list[str], error: str, tmp_path: Path) -> None:
    """As a user without torch runs them: ``python -m`` in a fresh interpreter that cannot import it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {error}") and done.stderr.count("\n") == 1, done.stderr
    assert _tree(tmp_path) == []
