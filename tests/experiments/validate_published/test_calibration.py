"""Calibration rows apart and the calibrated column (``data/calibration.yaml``).

Nothing here pins a predicted number: the expected values are computed from the predictions
themselves by the closed forms the rules state (the scale is the anchor's measured / predicted time;
a one-GPU step without DDP is all compute, so the scaled anchor reproduces its measurement).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from experiments.validate_published.calibration import apply_calibration, load_calibration
from experiments.validate_published.evaluate import (
    CALIBRATION,
    CALIBRATION_SUMMARY,
    PREDICTED,
    RowResult,
    evaluate,
    summarise,
)
from experiments.validate_published.mapping import load_mapping
from experiments.validate_published.training import StepSetup
from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.yamlload import safe_load
from tests.paths import REPO


def _table():
    return load_calibration(load_mapping().plans)


def _plans(*ids: int):
    by_id = {p.row.id: p for p in load_mapping().plans}
    return [by_id[i] for i in ids]


def test_every_constant_row_names_a_constant_that_exists() -> None:
    """An efficiency.yaml device key, or a preset's key holding the value the row set."""
    table = _table()
    devices = data_file("efficiency.yaml")["devices"]
    assert table.constant_rows, "the GEMM-plateau rows are calibration rows"
    presets = 0
    for constant in sorted({row.constant for row in table.constant_rows.values()}):
        if constant.startswith("efficiency.yaml"):
            pattern = constant.split("'")[1]
            key = constant.split(": ")[1].split()[0]
            assert key in devices[pattern], constant
            continue
        for part in constant.split("; "):
            path, dotted_value = part.split(" ", 1)
            dotted, value = dotted_value.split(": ")
            node = safe_load((REPO / path).read_text(encoding="utf-8"))
            for name in dotted.split("."):
                node = node[name]
            assert str(node) == value, part
            presets += 1
    assert presets == 2  # the p5 and p4de EFA latencies (rows 1 and 15)


def test_a_constant_row_is_reported_apart_and_never_in_its_category() -> None:
    plans = _plans(135, 136, 131)  # two A100 GEMM rows (calibration) and an A10G one (scored)
    results = apply_calibration(evaluate(plans), load_mapping().plans, _table())
    roles = {r.id: r.role for r in results}
    assert roles == {135: CALIBRATION, 136: CALIBRATION, 131: "scored"}
    by_category = {s.category: s for s in summarise(results)}
    kernels, apart = by_category["single_gpu_kernels"], by_category[CALIBRATION_SUMMARY]
    assert (kernels.rows, kernels.predicted) == (1, 1)
    a10g = next(r for r in results if r.id == 131)
    assert a10g.error_pct is not None
    assert kernels.mape_pct == pytest.approx(abs(a10g.error_pct))
    assert apart.rows == 2
    expected = sum(abs(r.error_pct or 0.0) for r in results if r.role == CALIBRATION) / 2
    assert apart.mape_pct == pytest.approx(expected)


def test_the_anchor_scale_is_its_measured_over_predicted_time_and_reproduces_it() -> None:
    plans = _plans(42, 46)  # ResNet-50: one GPU without DDP (anchor) and DDP on 8 GPUs
    plain = evaluate(plans)
    results = apply_calibration(plain, load_mapping().plans, _table())
    anchor, ddp8 = results
    assert plain[0].predicted is not None
    scale = anchor.measured / plain[0].predicted  # step_time_s: measured / predicted speed
    assert anchor.compute_scale == pytest.approx(scale, rel=1e-12)
    assert anchor.calibrated == pytest.approx(anchor.measured, rel=5e-3)
    assert ddp8.anchor == 42 and ddp8.compute_scale == anchor.compute_scale
    setup = plans[1].setup
    assert isinstance(setup, StepSetup)
    again = replace(setup, compute_scale=scale).predict("step_time_s").value
    assert ddp8.calibrated == pytest.approx(again, rel=1e-12)
    assert ddp8.calibrated != pytest.approx(ddp8.predicted, rel=1e-3)


def test_a_sources_own_matmul_anchors_its_kernel_rows_on_the_same_machine() -> None:
    """mli's A100: its FP16 matmul (148) scales its TF32 matmul (147) and its blocks (149, 150): a
    rate metric, so each calibrated rate is the predicted one over the anchor's predicted / measured
    rate, and the scaled anchor reproduces its own measurement."""
    plans = _plans(148, 147, 149, 150)
    plain = evaluate(plans)
    results = apply_calibration(plain, load_mapping().plans, _table())
    anchor = results[0]
    assert plain[0].predicted is not None
    scale = plain[0].predicted / anchor.measured
    assert anchor.compute_scale == pytest.approx(scale, rel=1e-12)
    assert anchor.calibrated == pytest.approx(anchor.measured, rel=1e-9)
    for row, before in zip(results[1:], plain[1:], strict=True):
        assert row.anchor == 148 and before.predicted is not None
        assert row.calibrated == pytest.approx(before.predicted / scale, rel=1e-9)


@pytest.mark.parametrize(
    ("anchor", "rows", "message"),
    [
        (149, [150], "anchor 149 must be a one-GPU 'step' row or a 'matmul' row"),
        (148, [46], "row 46 must be a 'matmul' or 'layer' row of one anchor only"),
        (42, [149], "row 149 must be a 'step' row of one anchor only"),
    ],
)
def test_an_anchor_calibrates_rows_of_its_own_family_only(
    tmp_path: Path, anchor: int, rows: list[int], message: str
) -> None:
    path = tmp_path / "calibration.yaml"
    path.write_text(f"anchors:\n  - anchor: {anchor}\n    rows: {rows}\n    reason: test\n", encoding="utf-8")
    with pytest.raises(TrainsimError, match=message):
        load_calibration(load_mapping().plans, path)


def test_the_anchor_is_found_when_the_selection_leaves_it_out() -> None:
    results = apply_calibration(evaluate(_plans(46)), load_mapping().plans, _table())
    assert results[0].anchor == 42 and results[0].calibrated is not None


def _result(i: int, error: float, calibrated: float | None, anchor: int | None) -> RowResult:
    return RowResult(
        i, "ddp", PREDICTED, "", "", "", "", "s", 1.0, predicted=1.0 + error / 100, error_pct=error,
        speed_bias_pct=-error, calibrated_error_pct=calibrated,
        calibrated_bias_pct=None if calibrated is None else -calibrated, anchor=anchor,
        calibrated=None if calibrated is None else 1.0,
    )  # fmt: skip


def test_the_calibrated_summary_leaves_anchors_out_and_falls_back_to_uncalibrated() -> None:
    rows = [_result(1, 10.0, 0.0, 1), _result(2, -20.0, 4.0, 1), _result(3, 6.0, None, None)]
    (summary,) = summarise(rows)
    assert summary.mape_pct == pytest.approx(12.0)  # (10 + 20 + 6) / 3
    assert summary.calibrated_mape_pct == pytest.approx(5.0)  # (4 + 6) / 2: the anchor left out
    assert summary.calibrated_bias_pct == pytest.approx(-5.0)
    assert summary.calibrated_rows == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("constant_rows: [{rows: [9999], constant: c, relation: restates, reason: r}]", "not published"),
        ("constant_rows: [{rows: [135], constant: c, relation: guessed, reason: r}]", "relation 'guessed'"),
        ("anchors: [{anchor: 46, rows: [47], reason: r}]", "anchor 46 must be a one-GPU"),
        ("anchors: [{anchor: 42, rows: [1], reason: r}]", "row 1 must be a 'step' row"),
        (
            "constant_rows: [{rows: [135], constant: c, relation: restates, reason: r}]\n"
            "independent: [{rows: [135], reason: r}]",
            "row 135 is already listed",
        ),
    ],
)
def test_a_bad_calibration_file_is_one_error_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "calibration.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TrainsimError, match=message):
        load_calibration(load_mapping().plans, path)
