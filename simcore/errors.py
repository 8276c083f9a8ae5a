"""User-facing errors and the one place a command line turns them into a clear line."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import TypeVar

__all__ = ["TrainsimError", "cli_entry"]

F = TypeVar("F", bound=Callable[..., object])


class TrainsimError(ValueError):
    """Bad input from a user: the message says what was wrong and what is allowed."""


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so user errors print one line on stderr and exit with status 2.

    Only :class:`TrainsimError` (and file-not-found) are caught: anything else is our bug and keeps
    its traceback.
    """

    @functools.wraps(main)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return main(*args, **kwargs)
        except TrainsimError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        except FileNotFoundError as exc:
            print(f"error: no such file: {exc.filename}", file=sys.stderr)
            raise SystemExit(2) from None
        except BrokenPipeError:
            # Output piped into `head` and closed early: not an error worth a traceback.
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until exit
            raise SystemExit(0) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(130) from None

    return wrapper  # type: ignore[return-value]
