"""User-facing errors and the one place a command line turns them into a clear line."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import sys
from collections.abc import Callable
from typing import TypeVar

__all__ = ["INTERNAL_ERROR_STATUS", "InternalError", "TrainsimError", "cli_entry", "run_scope"]

F = TypeVar("F", bound=Callable[..., object])

INTERNAL_ERROR_STATUS = 70  # EX_SOFTWARE (BSD sysexits.h): an internal software error was detected


class TrainsimError(ValueError):
    """Bad input from a user: the message says what was wrong and what is allowed."""


class InternalError(RuntimeError):
    """Our bug, caught before it became an answer (e.g. a physically impossible step record,
    :mod:`simcore.report_checks`): the message says what was impossible and where."""


# The cleanups of the command running now (the --out lock): closed when it returns or fails.
_RUN_SCOPE: contextvars.ContextVar[contextlib.ExitStack | None] = contextvars.ContextVar(
    "trainsim_run_scope", default=None
)
# Writing standard output failed in one of these ways: the terminal, file or pipe behind it is gone or full.
_STDOUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF, errno.EPIPE, errno.EINVAL})


def run_scope() -> contextlib.ExitStack | None:
    """The cleanups of the command :func:`cli_entry` is running (None outside one): what is entered
    here (a lock on ``--out``) is released when the command ends, however it ends."""
    return _RUN_SCOPE.get()


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's last flush of what is still
    buffered cannot fail again (and print "Exception ignored") after the one error line."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _stdout_failed(exc: OSError) -> bool:
    """An error writing standard output (no file name: ``print`` raised it), not a named file's."""
    return exc.filename is None and exc.errno in _STDOUT_ERRNOS


def _scoped(main: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    """``main`` with a fresh :func:`run_scope`, closed when it ends; standard output flushed."""
    with contextlib.ExitStack() as scope:
        _RUN_SCOPE.set(scope)
        result = main(*args, **kwargs)
        sys.stdout.flush()
    return result


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so user errors print one line on stderr and exit with status 2.

    Caught as user errors: :class:`TrainsimError`, a missing file, and a standard output that
    cannot be written (``> /dev/full``: one line, status 2; a pipe closed early, as by ``head``:
    status 0, nothing said). Standard output is flushed before the command counts as done. An
    :class:`InternalError` prints ``internal error: ..., please report`` and exits with
    :data:`INTERNAL_ERROR_STATUS`; anything else is our bug and keeps its traceback. What the
    command put in :func:`run_scope` is released on every way out.
    """

    @functools.wraps(main)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            # in a copy of the caller's context: what the command sets (its run scope, a lifted
            # input limit) ends with it, even when commands run one after another in one process
            return contextvars.copy_context().run(_scoped, main, args, kwargs)
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
            _silence_stdout()
            raise SystemExit(0) from None
        except OSError as exc:
            if not _stdout_failed(exc):
                raise
            _silence_stdout()
            print(f"error: cannot write standard output: {exc.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(130) from None

    return wrapper  # type: ignore[return-value]
