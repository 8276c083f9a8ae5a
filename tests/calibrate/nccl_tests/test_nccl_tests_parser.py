"""nccl-tests captures (text of every version, -J JSON) become the tidy rows our own job writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.nccl_tests import parser as nccl_tests
from calibrate.nccl_tests.parser import (
    COLLECTIVE_FIELDS,
    collective_row,
    format_float,
    format_table_header,
    format_table_row,
    parse_file,
    parse_text,
)
from simcore.errors import TrainsimError
from tests.paths import TESTS

DATA = TESTS / "data" / "nccl"


@pytest.mark.parametrize(
    ("name", "op", "rows", "ranks", "per_node", "scope"),
    [
        ("all_reduce_perf_8xa100.txt", "all_reduce", 62, 8, 8, "intra_node"),  # 31 sizes x 2 placements
        ("reduce_scatter_perf_8xa100.txt", "reduce_scatter", 56, 8, 8, "intra_node"),
        ("sendrecv_perf_8xa100.txt", "send_recv", 56, 8, 8, "intra_node"),
        ("broadcast_perf_8xa100.txt", "broadcast", 56, 8, 8, "intra_node"),
        ("all_gather_perf_16xh100.txt", "all_gather", 46, 16, 8, "inter_node"),
        ("all_reduce_perf_v100_old.txt", "all_reduce", 50, 4, 4, "intra_node"),
        ("all_reduce_perf_2node_ethernet.txt", "all_reduce", 16, 2, 1, "inter_node"),
        ("all_reduce_perf_8xh100.json", "all_reduce", 56, 8, 8, "intra_node"),
    ],
)
def test_captures_parse_into_tidy_rows(
    name: str, op: str, rows: int, ranks: int, per_node: int, scope: str
) -> None:
    parsed = parse_file(DATA / name)
    assert len(parsed) == rows
    assert {r["op"] for r in parsed} == {op}
    assert {(r["ranks"], r["ranks_per_node"], r["scope"]) for r in parsed} == {(ranks, per_node, scope)}
    assert all(set(r) == set(COLLECTIVE_FIELDS) for r in parsed)
    assert {r["in_place"] for r in parsed} == {False, True}
    sizes = [r["size_bytes"] for r in parsed if not r["in_place"]]
    assert sizes == sorted(sizes) and all(r["time_us_mean"] > 0 for r in parsed)


def test_values_are_read_exactly() -> None:
    rows = parse_file(DATA / "all_reduce_perf_2node_ethernet.txt")
    last_out, last_in = rows[-2], rows[-1]
    assert last_out["size_bytes"] == 17179869184 and last_out["count"] == 4294967296
    assert last_out["time_us_mean"] == 1.6e7  # printed as %.1e
    assert last_out["wrong"] is None  # printed as N/A
    assert (last_out["in_place"], last_in["in_place"]) == (False, True)
    assert last_out["busbw_GBps"] == 1.11  # nccl-tests' own figure is kept
    old = parse_file(DATA / "all_reduce_perf_v100_old.txt")
    assert old[-1]["wrong"] == 1e-07  # the old "error" column
    assert old[0]["dtype"] == "float32"


def test_several_runs_in_one_file_are_repeats() -> None:
    rows = parse_file(DATA / "all_reduce_perf_ring_then_tree.txt")
    assert [sum(r["repeat"] == k for r in rows) for k in (0, 1)] == [48, 48]


def test_json_report_matches_its_fields() -> None:
    data = json.loads((DATA / "all_reduce_perf_8xh100.json").read_text())
    rows = nccl_tests.parse_json(data, source="x.json")
    first = data["results"][0]
    assert rows[0]["time_us_mean"] == first["out_of_place"]["time"]
    assert rows[1]["time_us_mean"] == first["in_place"]["time"]
    data["results"][3]["out_of_place"] = None  # trace replay writes no out-of-place block
    assert len(nccl_tests.parse_json(data, source="x.json")) == len(rows) - 1


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("garbled_all_reduce_perf_bad_number.txt", r"bad_number.txt:19: time '11.7x' is not a number"),
        ("garbled_reduce_scatter_perf_fused_rows.txt", r"fused_rows.txt:20: 22 fields"),
        ("garbled_sendrecv_perf_no_header.txt", r"no_header.txt:1: a data row before any column header"),
        ("garbled_all_reduce_perf_empty_run.txt", r"empty_run.txt: no nccl-tests result rows"),
        ("garbled_truncated.json", r"truncated.json:1:\d+: not valid JSON"),
    ],
)
def test_malformed_captures_name_file_and_line(name: str, message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        parse_file(DATA / name)


@pytest.mark.parametrize(
    ("capture", "op"),
    [
        ("all_reduce_perf_8xa100.txt", "all_reduce"),  # busbw = 1.75 algbw on 8 ranks
        ("reduce_scatter_perf_8xa100.txt", "reduce_scatter"),  # 0.875, and a reduction
        ("sendrecv_perf_8xa100.txt", "send_recv"),  # 1, no root
        ("broadcast_perf_8xa100.txt", "broadcast"),  # 1, root 0, no reduction
        ("all_reduce_perf_v100_old.txt", "all_reduce"),  # 2018 layout: no root column; 1.5 on 4 ranks
        ("all_gather_perf_16xh100.txt", "all_gather"),  # v2.17 names itself in its header
        ("all_reduce_perf_8xh100.json", "all_reduce"),  # -J JSON, args[0] removed below
    ],
)
def test_a_slurm_output_file_is_read_by_what_its_log_says(capture: str, op: str, tmp_path: Path) -> None:
    """``slurm-1234.out`` names no program: the header or the rows tell which collective it is."""
    text = (DATA / capture).read_text()
    if capture.endswith(".json"):
        data = json.loads(text)
        data["args"] = []
        text = json.dumps(data)
    slurm = tmp_path / "slurm-1234.out"
    slurm.write_text(text)
    rows = parse_file(slurm)
    assert {r["op"] for r in rows} == {op}
    assert len(rows) == len(parse_file(DATA / capture))


def test_a_log_that_fits_two_collectives_must_be_named(tmp_path: Path) -> None:
    text = (DATA / "all_gather_perf_16xh100.txt").read_text()
    slurm = tmp_path / "slurm-1234.out"
    slurm.write_text(text.replace("# Collective test starting: all_gather_perf\n", ""))
    # all_gather and alltoall print the same: (n-1)/n, root -1, no reduction
    with pytest.raises(
        TrainsimError, match=r"slurm-1234.out:\d+: .* fit all_gather or alltoall; name the file"
    ):
        parse_file(slurm)
    assert {r["op"] for r in parse_file(slurm, op="all_gather")} == {"all_gather"}
    two_ranks = (DATA / "all_reduce_perf_2node_ethernet.txt").read_text()
    slurm.write_text(two_ranks)  # on 2 ranks all_reduce's factor is 1, as sendrecv's
    with pytest.raises(TrainsimError, match="fit all_reduce or send_recv"):
        parse_file(slurm)


def test_a_log_cut_mid_row_keeps_its_complete_rows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cut = DATA / "all_reduce_perf_cut_by_time_limit.txt"
    rows = parse_file(cut)
    assert [r["size_bytes"] for r in rows] == [8, 8, 16, 16, 32, 32]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: {cut}:20: dropped the last row, cut short (7 of 13 fields)")
    # Slurm appends its own message to the half-written row
    glued = (
        cut.read_text().rstrip("\n")
        + "slurmstepd: error: *** JOB 1234 ON n1 CANCELLED DUE TO TIME LIMIT ***\n"
    )
    (tmp_path / "slurm-1234.out").write_text(glued)
    assert len(parse_file(tmp_path / "slurm-1234.out", op="all_reduce")) == 6
    assert "cut short (text glued onto field 7: '1.40slurmstepd:" in capsys.readouterr().err
    # a short row with rows after it is no cut: an error
    mid = tmp_path / "all_reduce_perf.txt"
    lines = cut.read_text().splitlines()
    mid.write_text("\n".join([*lines, lines[-2]]))
    with pytest.raises(TrainsimError, match=r"all_reduce_perf.txt:20: 7 fields, the header announced 13"):
        parse_file(mid)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-8-sig", "utf-32"])
def test_a_powershell_capture_is_decoded(encoding: str, tmp_path: Path) -> None:
    """Windows PowerShell's ``>`` writes UTF-16 LE with a byte-order mark; without one it is still
    recognised by the zero high bytes of ASCII text."""
    source = DATA / "sendrecv_perf_8xa100.txt"
    capture = tmp_path / "sendrecv_perf.txt"
    capture.write_bytes(source.read_text().replace("\n", "\r\n").encode(encoding))
    assert parse_file(capture) == [{**r, "source": str(capture)} for r in parse_file(source)]


def test_a_binary_file_is_one_clear_error(tmp_path: Path) -> None:
    capture = tmp_path / "all_reduce_perf.txt"
    capture.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TrainsimError, match=r"all_reduce_perf.txt: a binary file \(NUL bytes\)"):
        parse_file(capture)
    capture.write_bytes(b"\xff\xfe" + b"\x00\xd8" * 3)  # a UTF-16 mark, then a lone surrogate
    with pytest.raises(TrainsimError, match="is not valid utf-16-le text"):
        parse_file(capture)


def test_wrong_rank_count_is_caught(tmp_path: Path) -> None:
    text = (DATA / "all_reduce_perf_8xa100.txt").read_text()
    kept = [line for line in text.splitlines() if not any(f"Rank  {r} " in line for r in range(2, 8))]
    capture = tmp_path / "all_reduce_perf.txt"
    capture.write_text("\n".join(kept))  # 2 device lines left: 2 ranks, bus factor 1 instead of 1.75
    with pytest.raises(TrainsimError, match=r"busbw .* does not follow"):
        parse_file(capture)


def test_cli_appends_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "nccl.jsonl"
    assert nccl_tests.main([str(DATA / "sendrecv_perf_8xa100.txt"), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 56
    with pytest.raises(SystemExit) as exc:
        nccl_tests.main([str(DATA / "garbled_truncated.json"), "-o", str(out)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(
    ("value", "text"),
    [(10.5, "  10.50"), (1234.5, "1234.50"), (12345.6, "12345.6"), (123456.0, " 123456"), (1.6e7, "1.6e+07")],
)
def test_format_float_matches_nccl_tests(value: float, text: str) -> None:
    assert format_float(value, 7) == text


_OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "alltoall", "reduce"]


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(_OPS),
    ranks=st.integers(2, 64),
    sizes=st.lists(st.integers(1, 1 << 36), min_size=1, max_size=8),
    time_us=st.floats(0.5, 9e8),
)
def test_printed_table_parses_back(op: str, ranks: int, sizes: list[int], time_us: float) -> None:
    """What calibrate.collectives prints, parse_text reads back: same rows, times within print precision."""
    rows = [collective_row(op=op, size_bytes=s, ranks=ranks, time_us_mean=time_us * (1 + s / 2**37), count=s // 4,
                           dtype="float32") for s in sorted(set(sizes))]  # fmt: skip
    devices = [
        f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on       host device {r:2d} [cpu] cpu"
        for r in range(ranks)
    ]
    text = "\n".join(
        [f"# Collective test starting: {nccl_tests.program_name(op)}", *devices,
         format_table_header("t", in_place=True), *map(format_table_row, rows)]
    )  # fmt: skip
    parsed = parse_text(text)
    assert [p["size_bytes"] for p in parsed] == [r["size_bytes"] for r in rows]
    for p, r in zip(parsed, rows, strict=True):
        assert (p["op"], p["ranks"], p["in_place"]) == (op, ranks, True)
        assert p["time_us_mean"] == pytest.approx(r["time_us_mean"], rel=0.06, abs=0.006)
