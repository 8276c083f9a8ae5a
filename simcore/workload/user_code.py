"""Running a user's model code (``--model package.module:factory``) so that it cannot take the
command down with it.

Importing a module and calling its factory runs arbitrary code: it may raise anything
(``RuntimeError``, ``KeyError``, ``SystemExit``), loop forever, or end the process itself
(``os._exit(0)``, a crash in an extension). :func:`run_isolated` runs it in a forked child with a time
limit and hands back either its result (pickled through a pipe) or one :class:`TrainsimError` line
naming the model and what happened. Where ``fork`` is missing (not Linux/macOS-with-fork), or with no
time limit, the call runs in this process, still with every exception turned into one line.

Hand-written on ``multiprocessing``: ``concurrent.futures`` cannot kill a task that overruns or tell
"the child exited 0 without an answer" from a result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

from simcore.errors import TrainsimError

__all__ = ["DEFAULT_IMPORT_TIMEOUT_S", "run_isolated", "user_code_error"]

# A large model's meta-device trace takes seconds; two minutes is far beyond any real one.
DEFAULT_IMPORT_TIMEOUT_S = 120.0

T = TypeVar("T")


def user_code_error(what: str, exc: BaseException) -> TrainsimError:
    """One line for an exception the user's code raised (a TrainsimError keeps its own line)."""
    if isinstance(exc, TrainsimError):
        return exc
    if isinstance(exc, SystemExit):
        return TrainsimError(f"{what}: the code called exit({exc.code!r}) instead of returning a model")
    text = str(exc).strip().splitlines()
    detail = f": {text[0]}" if text else ""
    return TrainsimError(f"{what}: the code raised {type(exc).__name__}{detail}")


def _in_process(what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code: anything at all, SystemExit included
        raise user_code_error(what, exc) from None


def _child(call: Callable[[], Any], what: str, conn: Any) -> None:
    try:
        answer: tuple[str, Any] = ("ok", call())
    except BaseException as exc:  # reported to the parent as one line, whatever it was
        answer = ("error", str(user_code_error(what, exc)))
    try:
        conn.send(answer)
    except Exception as exc:  # e.g. a result that does not pickle
        conn.send(("error", f"{what}: its result could not be passed back ({type(exc).__name__}: {exc})"))
    conn.close()
    os._exit(0)  # no atexit handlers or finalizers of the user's code in the child


def run_isolated(what: str, call: Callable[[], T], timeout_s: float | None = DEFAULT_IMPORT_TIMEOUT_S) -> T:
    """``call()`` in a forked child within ``timeout_s`` seconds (None: in this process, no limit).

    ``what`` names the code in the error line (``"model 'pkg.mod:build'"``)."""
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise TrainsimError(f"--import-timeout must be a positive number of seconds, got {timeout_s!r}")
    import multiprocessing  # here: the CLIs' --help imports this module for its default only

    if timeout_s is None or "fork" not in multiprocessing.get_all_start_methods():
        return _in_process(what, call)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(call, what, send), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise TrainsimError(
                f"{what}: importing and tracing it took longer than {timeout_s:g} s (it may loop "
                "forever); raise --import-timeout if it really needs longer"
            )
        try:
            status, value = receive.recv()
        except EOFError:
            child.join(5)
            raise TrainsimError(
                f"{what}: the code ended the process (exit status {child.exitcode}) before returning a model"
            ) from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    if status != "ok":
        raise TrainsimError(str(value))
    result: T = value
    return result
