"""The simulator benchmark entry point: its structure and its (deterministic) simulated results.

Wall times are never compared. Regenerate the golden file with
``TRAINSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_bench.py``.
"""

from __future__ import annotations

import json

import pytest

from experiments.bench.cli import BenchRow, collective_bench_rows, format_table, main
from tests.goldens import assert_golden


def _simulated(records: list[dict]) -> list[dict]:
    """What ran, and for the bare-network rows what the simulation decided (never wall times).

    Collective rows keep only their structure: their times and event counts belong to the
    collectives' own tests and change whenever an algorithm is refined.
    """
    out = []
    for r in records:
        row = {k: r[k] for k in ("op", "gpus", "nodes", "algorithm", "size_bytes")}
        if r["op"] == "ring_flows":
            row.update(events=r["events"], sim_time_s=float(f"{r['sim_time_s']:.9g}"))
        out.append(row)
    return out


def test_quick_json_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["op"], r["gpus"]) for r in records] == [
        (op, gpus) for gpus in (8, 16) for op in ("all_reduce", "all_gather", "ring_flows")
    ]
    for r in records:
        assert r["wall_s"] > 0 and r["events"] > 0 and r["sim_time_s"] > 0
        assert r["wall_per_gpu_us"] == pytest.approx(r["wall_s"] / r["gpus"] * 1e6)
    simulated = _simulated(records)
    assert_golden(
        "bench_quick.json",
        json.dumps(simulated, indent=1) + "\n",
        same=lambda a, b: json.loads(a) == json.loads(b),
    )


def test_table_has_a_header_and_one_line_per_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--gpus", "8"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "op",
        "gpus",
        "nodes",
        "algorithm",
        "size",
        "sim_time_ms",
        "events",
        "wall_ms",
        "cpu_ms",
        "wall_per_gpu_us",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["all_reduce", "all_gather", "ring_flows"]


def test_rows_function_is_reusable_for_other_rows() -> None:
    rows = collective_bench_rows([8], ops=["all_reduce"], size_bytes=1e6, repeats=2, network_rows=False)
    assert [type(r) for r in rows] == [BenchRow]
    assert "all_reduce" in format_table(rows)


@pytest.mark.parametrize("argv", [["--gpus", "8,x"], ["--gpus", "0"], ["--size", "-1"], ["--repeats", "0"]])
def test_bad_arguments_give_one_error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--quick", *argv] if "--repeats" not in argv else [*argv, "--gpus", "8"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_what_if_rows_time_the_step_model_at_several_sizes() -> None:
    from experiments.bench.whatif import WhatIfBenchRow, format_whatif_table, fsdp_step_rows

    rows = fsdp_step_rows([8, 16], model="gpt2-small", repeats=1)
    assert [(r.case, r.gpus) for r in rows] == [("fsdp step gpt2-small", 8), ("fsdp step gpt2-small", 16)]
    assert all(isinstance(r, WhatIfBenchRow) and r.wall_s > 0 and r.step_time_s for r in rows)
    table = format_whatif_table(rows).splitlines()
    assert table[0].split()[:3] == ["case", "gpus", "wall_s"] and len(table) == 3


def test_parallel_step_row_reports_a_3d_step() -> None:
    from experiments.bench.whatif import parallel_step_row

    row = parallel_step_row(gpus=64, repeats=1)
    assert row.case == "3d step llama2-70b" and row.gpus == 64 and row.repeats == 1
    assert row.wall_s > 0 and row.step_time_s is not None and row.step_time_s > 0
