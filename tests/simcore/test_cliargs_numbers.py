"""Numbers on the command line: finite, in range, with their unit; lists used once, with a note."""

from __future__ import annotations

import argparse

import pytest

from simcore.cliargs import Parser, int_list, name_list, real_range
from simcore.errors import TrainsimError
from simcore.planner.space import MAX_GPU_COUNTS, parse_gpu_counts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nan", "'nan' is not a finite number; allowed 1e-06..1e+06 per GPU-hour"),
        ("inf", "'inf' is not a finite number"),
        ("-inf", "'-inf' is not a finite number"),
        ("1e308", "1e+308 per GPU-hour is out of range; allowed 1e-06..1e+06 per GPU-hour"),
        ("1e-320", "'1e-320' is too small to compute with"),
        ("-1", "-1 per GPU-hour is out of range"),
        ("0", "0 per GPU-hour is out of range"),
        ("lots", "expected a number, got 'lots'"),
    ],
)
def test_real_range_refuses_with_the_range_and_unit(text: str, message: str) -> None:
    with pytest.raises(
        argparse.ArgumentTypeError, match="^" + message.replace("+", r"\+").replace("(", r"\(")
    ):
        real_range(1e-6, 1e6, unit="per GPU-hour")(text)


def test_real_range_takes_the_ends_and_zero_when_allowed() -> None:
    price = real_range(1e-6, 1e6)
    assert price("1e-6") == 1e-6 and price("1_000_000") == 1e6
    assert real_range(0.0, 1.0)("0") == 0.0
    with pytest.raises(ValueError, match="not a finite range"):
        real_range(0.0, float("inf"))


def test_repeated_list_items_are_used_once_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert int_list()("8,8,4,8") == [8, 4]
    assert "note: '8,8,4,8' repeats 8; each is used once" in capsys.readouterr().err
    assert name_list(["ddp", "fsdp"])("ddp,ddp") == ["ddp"]
    assert "repeats ddp" in capsys.readouterr().err
    assert int_list()("1,2") == [1, 2]
    assert capsys.readouterr().err == ""


def test_the_note_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = Parser("p")
    parser.add_argument("--tp", type=int_list())
    assert parser.parse_args(["--tp", "8,8"]).tp == [8]
    assert "note: --tp '8,8' repeats 8; each is used once" in capsys.readouterr().err


def test_allowed_names_are_never_an_empty_list() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"allowed: none are available here$"):
        name_list([])("x")


def test_gpu_ranges_are_bounded_from_their_end_points() -> None:
    with pytest.raises(TrainsimError, match=r"'1:65536:1' lists 65,536 GPU counts; at most 64"):
        parse_gpu_counts("1:65536:1")
    with pytest.raises(TrainsimError, match="ends past the largest count allowed"):
        parse_gpu_counts("1:99999999999:x2")
    assert len(parse_gpu_counts(f"1:{MAX_GPU_COUNTS}:1")) == MAX_GPU_COUNTS
    with pytest.raises(TrainsimError, match="at most 64"):
        parse_gpu_counts(",".join(str(n) for n in range(1, MAX_GPU_COUNTS + 2)))
    assert parse_gpu_counts("8..1024") == (8, 16, 32, 64, 128, 256, 512, 1024)
