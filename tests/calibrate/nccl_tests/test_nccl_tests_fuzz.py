"""Fuzzing ``python -m calibrate.nccl_tests`` with nccl-tests text and -J JSON logs, real ones mangled
and made up: whatever the file, the command ends with status 0 or 2, at most one ``error:`` line, no
traceback, and no non-finite number in the rows it writes."""

from __future__ import annotations

import contextlib
import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibrate.common.records import read_records
from calibrate.nccl_tests import parser as nccl_tests
from tests.paths import TESTS

DATA = TESTS / "data" / "nccl"
TEXT_CAPTURES = sorted(p.name for p in DATA.glob("*.txt"))
NAMES = ["slurm-1234.out", "all_reduce_perf.txt", "capture.log", "sendrecv_perf.txt"]
ODD_TOKENS = ["nan", "inf", "-inf", "-1", "0", "0.00", "1e999", "1e-320", "N/A", "", "x", "9" * 60, "sum",
              "none", "#", "#  size  time", "\x00", "\ufeff", "1.40slurmstepd:", "-0"]  # fmt: skip
FUZZ = settings(
    max_examples=150,
    deadline=timedelta(seconds=5),  # a time bound per example: no input may make the parser crawl
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _check_run(path: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the command on ``path``: status 0 or 2, at most one error line, finite rows."""
    out.unlink(missing_ok=True)
    capsys.readouterr()
    try:
        status = nccl_tests.main([str(path), "-o", str(out)])
    except SystemExit as exc:
        status = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert status in (0, 2), err
    assert len(errors) == (1 if status == 2 else 0), err
    assert "Traceback" not in err
    if status == 0:
        for row in read_records(out):
            numbers = [v for v in row.values() if isinstance(v, float)]
            assert all(math.isfinite(v) for v in numbers), row
            assert row["time_us_mean"] > 0 and row["size_bytes"] >= 0


@st.composite
def mangled_text(draw: st.DrawFn) -> str:
    """A real capture with lines dropped, repeated, cut, or with a token replaced."""
    lines = (DATA / draw(st.sampled_from(TEXT_CAPTURES))).read_text().splitlines()
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "repeat", "cut", "token", "insert"]))
        if action == "drop":
            del lines[at]
        elif action == "repeat":
            lines.insert(at, lines[at])
        elif action == "cut":
            lines = [*lines[:at], lines[at][: draw(st.integers(0, len(lines[at])))]]
        elif action == "token" and lines[at].split():
            tokens = lines[at].split()
            tokens[draw(st.integers(0, len(tokens) - 1))] = draw(
                st.sampled_from(ODD_TOKENS) | st.text(max_size=8)
            )
            lines[at] = "  ".join(tokens)
        else:
            lines.insert(at, draw(st.text(max_size=40)))
    return "\n".join(lines)


@FUZZ
@given(text=mangled_text() | st.text(max_size=300), name=st.sampled_from(NAMES),
       encoding=st.sampled_from(["utf-8", "utf-16", "utf-16-le"]))  # fmt: skip
def test_any_text_log_gives_rows_or_one_error_line(
    text: str, name: str, encoding: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding, errors="surrogatepass"))
    _check_run(path, tmp_path / "rows.jsonl", capsys)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(ODD_TOKENS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
REPORT = json.loads((DATA / "all_reduce_perf_8xh100.json").read_text())


@st.composite
def mangled_report(draw: st.DrawFn) -> Any:
    """The real -J report with values replaced at random places (top level, config, results)."""
    report = json.loads(json.dumps(REPORT))
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(["top", "config", "device", "result", "block"]))
        value, i = draw(JSON_VALUES), draw(st.integers(0, len(REPORT["results"]) - 1))
        with contextlib.suppress(LookupError, TypeError):  # an earlier edit replaced the container
            if target == "top":
                report[draw(st.sampled_from([*REPORT, "x"]))] = value
            elif target == "config":
                report["config"][draw(st.sampled_from(["nthreads", "ngpus", "devices"]))] = value
            elif target == "device":
                report["config"]["devices"][0][draw(st.sampled_from(["hostname", "device_info"]))] = value
            elif target == "result":
                report["results"][i][
                    draw(st.sampled_from(["size", "count", "type", "redop", "root", "out_of_place"]))
                ] = value
            else:
                report["results"][i]["in_place"][
                    draw(st.sampled_from(["time", "alg_bw", "bus_bw", "nwrong"]))
                ] = value
    if draw(st.booleans()) and isinstance(report, dict):
        report["args"] = []  # the collective must then come from the results
    return report


@FUZZ
@given(report=mangled_report() | JSON_VALUES, name=st.sampled_from(NAMES))
def test_any_json_report_gives_rows_or_one_error_line(
    report: Any, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_text("{" if report is None else json.dumps(report))  # json.dumps writes NaN as NaN
    _check_run(path, tmp_path / "rows.jsonl", capsys)


def _assert_header_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> None:
    """The first text capture with its column header's first ``old`` replaced by ``new`` is refused
    in one line, exit status 2."""
    lines = (DATA / TEXT_CAPTURES[0]).read_text().splitlines()
    at = next(
        i for i, line in enumerate(lines) if line.startswith("#") and "size" in line and "busbw" in line
    )
    lines[at] = lines[at].replace(old, new, 1)
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text("\n".join(lines))
    with pytest.raises(SystemExit) as exit_:
        nccl_tests.main([str(log), "-o", str(tmp_path / "rows.jsonl")])
    assert exit_.value.code == 2
    assert "a column header nccl-tests does not print" in capsys.readouterr().err


@pytest.mark.parametrize("swapped", ["busbw", "cputime", "algbw"])
def test_a_metric_column_among_the_leading_fields_is_refused(
    tmp_path: Path, swapped: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the fuzzer: a header naming a metric before the first time column shifted every
    metric block by one and ended in a KeyError; it is a header nccl-tests does not print."""
    _assert_header_refused(tmp_path, capsys, "count", swapped)


def test_a_leading_field_inside_a_metric_block_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the fuzzer: a header whose metric blocks each held a non-metric name (e.g. ``type``)
    passed the block check, shifted the blocks and ended in ``KeyError: 'cputime'``."""
    lines = (DATA / TEXT_CAPTURES[0]).read_text().splitlines()
    header = next(line for line in lines if line.startswith("#") and "size" in line and "busbw" in line)
    _assert_header_refused(tmp_path, capsys, header, header.replace("busbw", "busbw type"))
