"""Progress on stderr: a bar only on a terminal and without --quiet; stdout never touched."""

from __future__ import annotations

import io
import sys

import pytest

from experiments.common import progress as studies_progress
from simcore import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_bar(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, *, quiet: bool) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    with progress.bar(3, "grid", quiet=quiet) as shown_bar:
        for _ in range(3):
            shown_bar.update(1)
    return stream.getvalue()


def test_a_bar_shows_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "grid" in _run_bar(monkeypatch, _Terminal(), quiet=False)


@pytest.mark.parametrize(("stream", "quiet"), [(io.StringIO(), False), (_Terminal(), True)])
def test_no_bar_when_piped_or_quiet(
    monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, quiet: bool
) -> None:
    assert _run_bar(monkeypatch, stream, quiet=quiet) == ""


def test_track_yields_every_item_and_notes_respect_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress.track(iter("abc"), 3, "letters", quiet=False)) == ["a", "b", "c"]
    progress.note("wrote x", quiet=True)
    progress.note("wrote y", quiet=False)
    progress.warn("odd input")
    assert capsys.readouterr() == ("", "note: wrote y\nwarning: odd input\n")


def test_the_studies_use_the_same_helpers() -> None:
    assert studies_progress.bar is progress.bar and studies_progress.note is progress.note
