"""tests.goldens: a match passes, a mismatch fails with a diff, TRAINSIM_UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import goldens
from tests.goldens import assert_golden


@pytest.fixture
def golden_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(goldens, "GOLDEN_DIR", tmp_path)
    monkeypatch.delenv(goldens.UPDATE_ENV, raising=False)
    return tmp_path


def test_equal_text_passes(golden_dir: Path) -> None:
    (golden_dir / "table.txt").write_text("a 1\nb 2\n", encoding="utf-8")
    assert_golden("table.txt", "a 1\nb 2\n")


def test_a_difference_fails_with_a_diff_naming_the_golden(golden_dir: Path) -> None:
    (golden_dir / "table.txt").write_text("a 1\nb 2\n", encoding="utf-8")
    with pytest.raises(AssertionError) as failure:
        assert_golden("table.txt", "a 1\nb 3\n")
    message = str(failure.value)
    assert "golden/table.txt" in message and "TRAINSIM_UPDATE_GOLDEN=1" in message
    assert "-b 2\n" in message and "+b 3\n" in message


def test_a_long_diff_is_cut(golden_dir: Path) -> None:
    (golden_dir / "long.txt").write_text("".join(f"{i}\n" for i in range(200)), encoding="utf-8")
    with pytest.raises(AssertionError) as failure:
        assert_golden("long.txt", "")
    assert "more diff lines" in str(failure.value)


def test_a_missing_golden_says_how_to_create_it(golden_dir: Path) -> None:
    with pytest.raises(
        AssertionError, match=r"missing golden new\.txt; create it with TRAINSIM_UPDATE_GOLDEN=1"
    ):
        assert_golden("new.txt", "x\n")


def test_update_rewrites_the_golden(golden_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (golden_dir / "table.txt").write_text("old\n", encoding="utf-8")
    monkeypatch.setenv(goldens.UPDATE_ENV, "1")
    assert_golden("table.txt", "new\n")
    assert (golden_dir / "table.txt").read_text(encoding="utf-8") == "new\n"


def test_a_custom_comparison_decides_the_match(golden_dir: Path) -> None:
    (golden_dir / "numbers.txt").write_text("1.0\n", encoding="utf-8")
    assert_golden("numbers.txt", "1.00\n", same=lambda text, expected: float(text) == float(expected))
    with pytest.raises(AssertionError, match=r"\+2\.0"):
        assert_golden("numbers.txt", "2.0\n", same=lambda text, expected: float(text) == float(expected))
