"""experiments.validate_parallel: the published rows, their FLOP counts, and the report."""

from __future__ import annotations

import json

import pytest

from experiments.validate_parallel.cli import load_rows, main, mape, paper_flops, predict_row
from tests.goldens import assert_golden


def test_every_row_names_its_source_and_a_valid_layout() -> None:
    rows = load_rows()
    assert len(rows) == 18
    for row in rows:
        assert row["source"].startswith(("Narayanan et al. 2021", "Korthikanti et al. 2022"))
        gpus, tp, pp = int(row["gpus"]), int(row["tp"]), int(row["pp"])
        assert gpus % (tp * pp) == 0
        dp = gpus // (tp * pp)
        assert int(row["global_batch"]) % (dp * int(row["micro_batch"])) == 0


def test_paper_flop_counts() -> None:
    rows = {r["config"]: r for r in load_rows()}
    # Narayanan et al. 2021, sec. 5.1: the 1 T model's 502 PFLOP/s aggregate at 163 TFLOP/s per GPU
    one_t = rows["table1-1008B"]
    assert paper_flops(one_t) / (163e12 * 3072) == pytest.approx(paper_flops(one_t) / 502e15, rel=0.01)
    # Korthikanti et al. 2022: 175 B at 51.4% MFU on 64 GPUs is a 13.75 s iteration (Table 5)
    seconds = paper_flops(rows["korthikanti-175B-sp-selective"]) / (0.514 * 64 * 312e12)
    assert seconds == pytest.approx(13.75, rel=0.005)


def test_predict_row_is_the_harness_interface() -> None:
    row = next(r for r in load_rows() if r["config"] == "korthikanti-22B-sp-selective")
    predicted = predict_row(row)
    assert predicted.metric == "mfu" and predicted.published == 0.415
    assert predicted.error == pytest.approx(predicted.predicted / 0.415 - 1)
    assert 0.2 < predicted.predicted < 0.75
    assert mape([predicted]) == pytest.approx(abs(predicted.error) * 100)


def test_report_of_the_22b_rows_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "korthikanti-22B"]) == 0
    out = capsys.readouterr().out
    assert_golden("validate_parallel_22b.txt", out)
    assert "MAPE all" in out


def test_json_and_bad_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "korthikanti-22B-full", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["rows"]) == 1 and document["mape_percent"] >= 0
    with pytest.raises(SystemExit) as exit_info:
        main(["--only", "nothing"])
    assert exit_info.value.code == 2
