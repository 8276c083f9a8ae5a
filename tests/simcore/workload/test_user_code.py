"""User model code run in a child with a time limit: every way it can fail is one line."""

from __future__ import annotations

import os
import time

import pytest

from simcore.errors import TrainsimError
from simcore.workload.user_code import run_isolated


def _raise_key() -> None:
    raise KeyError("missing")


def _exit() -> None:
    raise SystemExit(3)


def _hard_exit() -> None:
    os._exit(0)


def _loop() -> None:
    while True:
        time.sleep(0.05)


def _unpicklable() -> object:
    return lambda: None


@pytest.mark.parametrize("timeout", [5.0, None])
def test_a_result_comes_back_from_the_child_or_in_process(timeout: float | None) -> None:
    assert run_isolated("model 'x:y'", lambda: {"layers": (1, 2, 3)}, timeout) == {"layers": (1, 2, 3)}


@pytest.mark.parametrize("timeout", [5.0, None])
@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (_raise_key, "model 'x:y': the code raised KeyError: 'missing'"),
        (_exit, "model 'x:y': the code called exit(3) instead of returning a model"),
        (lambda: 1 / 0, "model 'x:y': the code raised ZeroDivisionError: division by zero"),
    ],
)
def test_exceptions_and_exits_are_one_line(call: object, expected: str, timeout: float | None) -> None:
    with pytest.raises(TrainsimError) as info:
        run_isolated("model 'x:y'", call, timeout)  # type: ignore[arg-type]
    assert str(info.value) == expected


def test_a_trainsim_error_keeps_its_own_line() -> None:
    def refuse() -> None:
        raise TrainsimError("model 'x:y': no such file 'x'")

    with pytest.raises(TrainsimError, match=r"^model 'x:y': no such file 'x'$"):
        run_isolated("model 'x:y'", refuse, 5.0)


def test_code_that_ends_the_process_is_reported_not_silent() -> None:
    with pytest.raises(TrainsimError, match=r"ended the process \(exit status 0\) before returning a model"):
        run_isolated("model 'x:y'", _hard_exit, 5.0)


def test_code_that_never_returns_is_stopped_at_the_limit() -> None:
    start = time.monotonic()
    with pytest.raises(TrainsimError, match=r"took longer than 0.5 s .*--import-timeout"):
        run_isolated("model 'x:y'", _loop, 0.5)
    assert time.monotonic() - start < 5


def test_a_result_that_does_not_pickle_is_one_line() -> None:
    with pytest.raises(TrainsimError, match=r"its result could not be passed back"):
        run_isolated("model 'x:y'", _unpicklable, 5.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_the_limit_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(TrainsimError, match="--import-timeout"):
        run_isolated("model 'x:y'", lambda: 1, bad)
