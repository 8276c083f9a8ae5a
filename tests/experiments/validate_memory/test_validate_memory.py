"""``python -m experiments.validate_memory``: the --quick table's structure (golden), report files,
reading measured records, the simulator side's invariants and bad input.

The numbers come from real tracked steps (calibrate.memory_truth), so the golden file keeps the
table's *structure* (header, configuration keys, which cells are numbers) with every number masked.
Regenerate it with ``TRAINSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_validate_memory.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments.validate_memory.cli import compare, main
from tests.goldens import assert_golden

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")


def table_structure(text: str) -> str:
    """Mask every number after the four key columns; cells joined by ' | ' (widths vary with data)."""
    lines = []
    for line in text.splitlines():
        if set(line) == {"-"}:
            lines.append("---")
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) > 4:
            cells = cells[:4] + [
                _NUMBER.sub("#", c).replace("MISS", "<goal>").replace("ok", "<goal>") for c in cells[4:]
            ]
            lines.append(" | ".join(cells))
        else:
            lines.append(_NUMBER.sub("#", line))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One real ``--quick --out DIR`` run shared by the tests below (12 tracked steps)."""
    out_dir = tmp_path_factory.mktemp("validate_memory")
    capture = out_dir / "stdout.txt"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["--quick", "--out", str(out_dir)]) == 0
    capture.write_text(buffer.getvalue(), encoding="utf-8")
    return buffer.getvalue(), out_dir


@pytest.mark.integration
@pytest.mark.slow
def test_quick_table_structure_is_golden(quick_run: tuple[str, Path]) -> None:
    text = "\n".join(line for line in quick_run[0].splitlines() if not line.startswith("wrote "))
    structure = table_structure(text)
    assert_golden("validate_memory_quick.txt", structure)


@pytest.mark.integration
@pytest.mark.slow
def test_quick_run_writes_records_report_and_plots(quick_run: tuple[str, Path]) -> None:
    out_dir = quick_run[1]
    records = [
        json.loads(line) for line in (out_dir / "memory_truth.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(records) == 12 and all(r["kind"] == "memory_truth" and "provenance" in r for r in records)
    comparison = json.loads((out_dir / "memory_comparison.json").read_text(encoding="utf-8"))
    assert len(comparison["rows"]) == 12 and "import" in comparison["summary"]
    report = (out_dir / "memory_report.md").read_text(encoding="utf-8")
    assert report.startswith("# Per-rank memory") and "peak within 5%" in report
    for name in ("memory_peak.png", "memory_categories.png"):
        assert (out_dir / name).stat().st_size > 1000


@pytest.mark.integration
@pytest.mark.slow
def test_simulator_side_follows_the_measured_configuration(quick_run: tuple[str, Path]) -> None:
    """Predicted model state: FSDP shards it by W, DDP does not; overhead is off; parameters agree."""
    records = [json.loads(line) for line in (quick_run[1] / "memory_truth.jsonl").read_text().splitlines()]
    rows = compare(records, ["import"])
    for row, record in zip(rows, records, strict=True):
        assert (row.model, row.strategy, row.world_size) == (
            record["model"],
            record["strategy"],
            record["world_size"],
        )
        assert row.predicted["temp"] >= 0.0  # tied-gradient partials and optimizer scratch
        full = record["params_local_bytes"] * (record["world_size"] if row.strategy == "fsdp" else 1)
        expected = full / row.world_size if row.strategy == "fsdp" else full
        # the simulator has no module buffers (batch-norm statistics) and no FSDP2 shard padding
        assert row.predicted["params"] == pytest.approx(expected, rel=0.1)
        assert row.predicted["optimizer"] == pytest.approx(record["optimizer_state_bytes"], rel=0.1)
    again = compare(records[:2], ["import"])
    assert again == rows[:2]  # deterministic


def test_measured_file_must_exist(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--measured", str(tmp_path / "missing.jsonl")])
    assert exit_info.value.code == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_measured_file_without_memory_records_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"kind": "step"}) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--measured", str(path)])
    assert "no memory_truth records" in capsys.readouterr().err


def test_unknown_source_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--quick", "--sources", "guess"])
    assert "--sources" in capsys.readouterr().err
