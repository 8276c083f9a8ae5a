"""No calibration job adds to or replaces earlier measurements unless told to (--resume, --force).

The jobs run in process with their measuring part replaced (as ``calibrate.slurm.preflight`` does),
so these tests check the command line and its checks, not torch.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from calibrate.train import cli as train

EARLIER = '{"kind": "provenance", "job": "earlier"}\n'
# job -> (its CLI module, the function that measures, the record file in --out, tiny options)
JOBS = {
    "collectives": ("calibrate.collectives.cli", "run_sweep", "collectives.jsonl", ["-e", "64"]),
    "compute": ("calibrate.compute.cli", "run_compute", "compute.jsonl", ["--layers", "none"]),
}


def _run(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return int(code or 0), capsys.readouterr().err


def _job(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[Any], str, list[str]]:
    pytest.importorskip("torch", reason="the measuring jobs import torch")
    module_name, runner, records, tiny = JOBS[name]
    module = importlib.import_module(module_name)
    calls: list[Any] = []

    def measure_nothing(args: Any) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(module, runner, measure_nothing)
    for variable in ("RANK", "SLURM_PROCID"):
        monkeypatch.delenv(variable, raising=False)
    return module.main, calls, records, tiny


@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_folder_holding_the_jobs_records_is_refused_before_measuring(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main, calls, records, tiny = _job(name, monkeypatch)
    (tmp_path / records).write_text(EARLIER)
    code, err = _run(main, ["--out", str(tmp_path), *tiny], capsys)
    assert (code, calls) == (2, [])
    assert err == (
        f"error: --out {str(tmp_path)!r} already holds earlier measurements ({records}); add --resume to "
        "measure only what they lack, --force to add a new measurement to them, or choose a new folder\n"
    )
    assert (tmp_path / records).read_text() == EARLIER


@pytest.mark.parametrize("name", sorted(JOBS))
def test_resume_force_or_another_jobs_folder_measure(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main, calls, records, tiny = _job(name, monkeypatch)
    (tmp_path / "other.jsonl").write_text(
        EARLIER
    )  # another job's records: collectives and compute share runs/
    assert _run(main, ["--out", str(tmp_path), *tiny], capsys)[0] == 0
    (tmp_path / records).write_text(EARLIER)
    for flag in ("--resume", "--force"):
        assert _run(main, ["--out", str(tmp_path), *tiny, flag], capsys)[0] == 0
    assert len(calls) == 3


@pytest.mark.parametrize("name", sorted(JOBS))
def test_only_the_writing_rank_checks_the_folder(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 alone writes; another rank's node may not even see the folder."""
    main, calls, records, tiny = _job(name, monkeypatch)
    (tmp_path / records).write_text(EARLIER)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _run(main, ["--out", str(tmp_path), *tiny], capsys)[0] == 0 and len(calls) == 1


@pytest.mark.parametrize(
    ("job", "argv", "message"),
    [
        ("collectives", ["-b", "0"], "-b/--minbytes: size: '0' is not allowed"),
        ("collectives", ["-n", "0"], "-n/--iters: 0 is out of range; allowed 1..1000000"),
        ("collectives", ["--backend", "tcp"], "--backend: invalid choice: 'tcp'"),
        ("collectives", ["--ops", "all_reduce,allgather"], "--ops: unknown op 'allgather'"),
        ("compute", ["--matmul-sizes", "64,x"], "--matmul-sizes: expected a whole number, got 'x'"),
        ("compute", ["--matmul-sizes", "0"], "--matmul-sizes: 0 is out of range; allowed 1..32768"),
        ("compute", ["--layers", "linear,lstm"], "--layers: unknown layer 'lstm'"),
        ("compute", ["--op-chains", "4,-1"], "--op-chains: -1 is out of range"),
        (
            "compute",
            ["--mem-bytes", "1000G"],
            "--mem-bytes: size '1000G' is larger than the 64.00 GiB allowed",
        ),
    ],
)
def test_job_options_are_checked_by_their_types(
    job: str,
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    main, calls, _, _ = _job(job, monkeypatch)
    code, err = _run(main, ["--out", str(tmp_path), *argv], capsys)
    assert (code, calls) == (2, []) and err.startswith(f"error: {message}") and err.count("\n") == 1


def test_compute_lists_parse_sorted_and_none_skips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    main, calls, _, _ = _job("compute", monkeypatch)
    assert (
        main(["--out", str(tmp_path), "--matmul-sizes", "256,64", "--layers", "none", "--op-chains", "none"])
        == 0
    )
    assert (calls[0].matmul_sizes, calls[0].layers, calls[0].op_chains) == ([64, 256], [], [])


def _train(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(train, "run_training", lambda config: calls.append(config))
    monkeypatch.setattr(train, "require_torch", lambda command: None)  # the check is tested without torch
    for variable in ("RANK", "SLURM_PROCID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(variable, raising=False)
    return calls


def test_a_training_file_holding_records_needs_resume_or_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    calls = _train(monkeypatch)
    out = tmp_path / "train.jsonl"
    out.write_text(EARLIER)
    with pytest.raises(SystemExit) as exc:
        train.main(["--out", str(out)])
    assert exc.value.code == 2 and not calls and out.read_text() == EARLIER
    assert capfd.readouterr().err == (
        f"error: --out {str(out)!r} already holds earlier records; add --resume to continue them, "
        "--force to append a new run to them, or choose a new file\n"
    )
    assert train.main(["--out", str(out), "--resume"]) == 0
    assert train.main(["--out", str(out), "--force"]) == 0
    assert [(c.resume, c.force) for c in calls] == [(True, False), (False, True)]
    assert "force" not in calls[1].identity()  # how a run was started does not make it another run


def test_each_rank_checks_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _train(monkeypatch)
    (tmp_path / "t.1.jsonl").write_text(EARLIER)
    assert train.main(["--out", str(tmp_path / "t.{rank}.jsonl")]) == 0  # rank 0's file is new
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "t.{rank}.jsonl")])
    assert len(calls) == 1
