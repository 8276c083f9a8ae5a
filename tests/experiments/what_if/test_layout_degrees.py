"""The what-if's layout degree lists (``--tp 8,8,8``): a degree listed twice is one layout."""

from __future__ import annotations

import pytest

from experiments.what_if.layouts import _degrees
from simcore.errors import TrainsimError


def test_a_repeated_degree_is_used_once_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert _degrees("8,8,8", "tp") == [8]
    assert _degrees("2,4,2", "pp") == [2, 4]
    assert capsys.readouterr().err.splitlines() == [
        "note: --tp '8,8,8' repeats 8; each is used once",
        "note: --pp '2,4,2' repeats 2; each is used once",
    ]


def test_distinct_degrees_keep_their_order_and_say_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert _degrees("4,1,2", "tp") == [4, 1, 2]
    assert _degrees(None, "cp") == [1]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text", ["0", "x", ",", "-1"])
def test_bad_degrees_are_one_error(text: str) -> None:
    with pytest.raises(TrainsimError, match="--tp"):
        _degrees(text, "tp")
