"""User-facing errors and the one place a command line turns them into a clear line."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import TypeVar

__all__ = ["INTERNAL_ERROR_STATUS", "InternalError", "TrainsimError", "cli_entry"]

F = TypeVar("F", bound=Callable[..., object])

INTERNAL_ERROR_STATUS = 70  # EX_SOFTWARE (BSD sysexits.h): an internal software error was detected


class TrainsimError(ValueError):
    """Bad input from a user: the message says what was wrong and what is allowed."""


class InternalError(RuntimeError):
    """Our bug, caught before it became an answer (e.g. a physically impossible step record,
    :mod:`simcore.report_checks`): the message says what was impossible and where."""


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so user errors print one line on stderr and exit with status 2.

    Only :class:`TrainsimError` (and file-not-found) are caught as user errors. An
    :class:`InternalError` prints ``internal error: ..., please report`` and exits with
    :data:`INTERNAL_ERROR_STATUS`; anything else is our bug and keeps its traceback.
    """

    @functools.wraps(main)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return main(*args, **kwargs)
        except TrainsimError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        except InternalError as exc:
            print(f"internal error: {exc}, please report", file=sys.stderr)
            raise SystemExit(INTERNAL_ERROR_STATUS) from None
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
