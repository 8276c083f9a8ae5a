"""Record readers keep each measurement key once: a resumed job beside a live writer cannot count twice."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from calibrate.common.records import MEASUREMENT_KEYS, done_keys, read_records
from calibrate.fit.cli import load_rows


def _collective(size: int, repeat: int, time_us: float) -> dict[str, object]:
    return {"kind": "collective", "op": "all_reduce", "size_bytes": size, "group": "world", "repeat": repeat,
            "time_us": time_us}  # fmt: skip


def _write_with_duplicates(path: Path) -> None:
    rows = [
        {"kind": "provenance", "job": "calibrate.collectives"},
        _collective(1024, 0, 10.0),
        _collective(1024, 1, 11.0),
        {"kind": "provenance", "job": "calibrate.collectives"},  # a second run's: kept, not a measurement
        _collective(1024, 0, 99.0),  # the same measurement again (a second writer): dropped
        _collective(2048, 0, 20.0),
        _collective(1024, 1, 98.0),  # dropped
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_duplicates_of_a_measurement_key_are_dropped_first_kept_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "collectives.jsonl"
    _write_with_duplicates(path)
    records = read_records(path)
    times = [r["time_us"] for r in records if r["kind"] == "collective"]
    assert times == [10.0, 11.0, 20.0]
    assert sum(r["kind"] == "provenance" for r in records) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{path}: 2 duplicate record(s) of a measurement already in the file dropped (the first of each kept)"
    ]
    assert done_keys(path, ("op", "size_bytes", "group", "repeat")) == {
        ("all_reduce", 1024, "world", 0), ("all_reduce", 1024, "world", 1), ("all_reduce", 2048, "world", 0)
    }  # fmt: skip


def test_a_file_without_duplicates_is_read_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps(_collective(1024, 0, 1.0)) + "\n" + json.dumps(_collective(1024, 1, 1.0)) + "\n"
    )
    assert len(read_records(path)) == 2 and capsys.readouterr().err == ""


def test_csv_records_are_deduplicated_as_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "collectives.csv"
    fields = ["kind", "op", "size_bytes", "group", "repeat", "time_us"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in (_collective(1024, 0, 10.0), _collective(1024, 0, 99.0), _collective(4096, 0, 30.0)):
            writer.writerow(row)
    assert [r["time_us"] for r in read_records(path)] == ["10.0", "30.0"]
    assert "1 duplicate record(s)" in capsys.readouterr().err


def test_calibrate_fit_reads_each_measurement_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "collectives.jsonl"
    _write_with_duplicates(path)
    rows = load_rows([str(path)])
    assert sorted(r["time_us"] for r in rows if r["kind"] == "collective") == [10.0, 11.0, 20.0]
    assert "2 duplicate record(s)" in capsys.readouterr().err


def test_the_keys_are_the_jobs_resume_keys() -> None:
    from calibrate.collectives import sweep
    from calibrate.compute import measure

    assert MEASUREMENT_KEYS["collective"] == sweep._RESUME_KEY
    assert MEASUREMENT_KEYS["matmul"] == MEASUREMENT_KEYS["slowdown"] == measure._RESUME_KEY
