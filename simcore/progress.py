"""Progress and notes on stderr: a tqdm bar while a long command works, silent when piped or quiet.

A bar shows only when stderr is a terminal and ``--quiet`` was not given, so logs, pipes and
tests see none of it; stdout (tables, JSON) is never touched. Every command uses these: the
studies (through :mod:`experiments.common.progress`) and the calibration jobs alike.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["bar", "echo", "note", "shown", "track", "warn"]

T = TypeVar("T")


def shown(quiet: bool) -> bool:
    """Whether progress goes to stderr: a terminal, and not ``--quiet``."""
    return not quiet and sys.stderr.isatty()


class _Hidden:
    """The bar where none is shown: the calls a bar takes, doing nothing (tqdm itself, ~0.1 s to
    import, is loaded only when a bar is drawn)."""

    def __enter__(self) -> _Hidden:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        return None

    def close(self) -> None:
        return None


def bar(total: int, desc: str, *, quiet: bool, unit: str = "it") -> Any:
    """A tqdm bar of ``total`` steps on stderr (a no-op bar unless :func:`shown`)."""
    if not shown(quiet):
        return _Hidden()
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
        dynamic_ncols=True,
    )  # fmt: skip


def track(items: Iterable[T], total: int, desc: str, *, quiet: bool, unit: str = "it") -> Iterator[T]:
    """Iterate ``items`` while a bar counts them."""
    with bar(total, desc, quiet=quiet, unit=unit) as progress:
        for item in items:
            yield item
            progress.update(1)


def echo(text: str) -> None:
    """One line of results on stdout, above any bar on stderr (which is redrawn after it)."""
    from tqdm import tqdm

    tqdm.write(text, file=sys.stdout)
    sys.stdout.flush()


def note(text: str, *, quiet: bool) -> None:
    """One ``note:`` line on stderr (an estimate of long work, what was written), unless quiet."""
    if not quiet:
        print(f"note: {text}", file=sys.stderr, flush=True)


def warn(text: str) -> None:
    """One ``warning:`` line on stderr: the input is allowed but probably not what was meant."""
    print(f"warning: {text}", file=sys.stderr, flush=True)
