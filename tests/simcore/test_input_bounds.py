"""Inputs are checked before they are read: regular files only, a size bound that can be lifted."""

from __future__ import annotations

import contextvars
import os
from pathlib import Path

import pytest

from simcore.errors import TrainsimError
from simcore.inputs import LIMIT_ENV, byte_limit, check_input_file, input_lines, lift_input_limit, read_bytes
from simcore.limits import Bound

SMALL = Bound("bytes in one test file", 10, "a test bound")


def test_a_fifo_a_device_and_a_folder_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would block forever
    with pytest.raises(TrainsimError, match="not a regular file"):
        read_bytes(fifo, "a log")
    with pytest.raises(TrainsimError, match="not a regular file"):
        check_input_file("/dev/zero", "a log")
    with pytest.raises(TrainsimError, match="a folder, not a file"):
        check_input_file(tmp_path, "a log")
    with pytest.raises(TrainsimError, match="no such file"):
        check_input_file(tmp_path / "missing", "a log")


def test_the_size_bound_names_the_size_the_bound_and_how_to_lift_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    with pytest.raises(TrainsimError, match=rf"11 bytes in one test file; at most 10 .*{LIMIT_ENV}=SIZE"):
        read_bytes(path, "a log", SMALL)
    assert check_input_file(tmp_path / "f", "a log", Bound("b", 11, "y")) == 11
    monkeypatch.setenv(LIMIT_ENV, "1KiB")
    assert byte_limit(SMALL) == 1024 and read_bytes(path, "a log", SMALL) == b"x" * 11
    monkeypatch.setenv(LIMIT_ENV, "1")  # lifting never lowers a bound
    assert byte_limit(SMALL) == 10
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(TrainsimError, match=LIMIT_ENV):
        byte_limit(SMALL)


def test_lift_input_limit_holds_for_the_command_that_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LIMIT_ENV, raising=False)

    def lifted() -> int:
        lift_input_limit(2**30)
        return byte_limit(SMALL)

    assert contextvars.copy_context().run(lifted) == 2**30
    assert byte_limit(SMALL) == 10  # the caller's context is untouched


def test_input_lines_streams_the_lines_with_their_newlines(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text("a\nb\r\nc")
    assert list(input_lines(path, "records", Bound("b", 100, "y"))) == ["a\n", "b\r\n", "c"]
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(TrainsimError, match="not a UTF-8 text file"):
        list(input_lines(path, "records", Bound("b", 100, "y")))
