"""Record files are read a line at a time and a torn tail is cut from the end, never read whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from calibrate.common import records
from calibrate.common.records import distinct_files, drop_torn_tail, read_records
from simcore.errors import TrainsimError


def test_a_torn_last_record_is_dropped_and_a_torn_middle_one_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3')
    assert read_records(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(TrainsimError, match=r"r\.jsonl:2: not a JSON record"):
        read_records(path)


def test_a_fifo_as_a_record_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "r.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TrainsimError, match="not a regular file"):
        read_records(fifo)


def test_drop_torn_tail_reads_only_the_end_of_a_long_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "_CHUNK", 64)  # many chunks: the backward scan crosses chunk edges
    path = tmp_path / "r.jsonl"
    lines = [json.dumps({"i": i, "pad": "x" * 50}) + "\n" for i in range(200)]
    path.write_text("".join(lines) + '{"i": 200, "pad": "xx')
    removed = drop_torn_tail(path, warn=False)
    assert removed == len('{"i": 200, "pad": "xx') and path.read_text() == "".join(lines)
    assert drop_torn_tail(path) == 0
    path.write_text("no newline at all")
    assert drop_torn_tail(path, warn=False) == len("no newline at all") and path.read_text() == ""


def test_the_warning_names_the_line_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a"')
    drop_torn_tail(path)
    assert f"{path}:3: dropped a torn record (4 bytes" in capsys.readouterr().err


def test_distinct_files_reads_a_repeat_once_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    a.write_text("same")
    b.write_text("same")
    c.write_text("other")
    assert distinct_files([a, b, a, c], "a log", quiet=False) == [a, c]
    err = capsys.readouterr().err
    assert f"{b}: the same bytes as {a}" in err and f"{a}: given twice" in err
