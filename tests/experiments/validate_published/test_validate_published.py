"""``python -m experiments.validate_published``: the copied rows, the mapping, the report's structure.

Predictions change whenever the model does, so nothing here pins a predicted number: the tests check
that every row is either predicted (a finite value, its error and bias consistent with it) or listed
with a reason, that the formats and ``--out`` carry the same rows, and that bad input is one error
line with exit status 2.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.nccl_sim.cli import rows_for
from experiments.validate_published.cli import OUT_FILES, main
from experiments.validate_published.collective import parse
from experiments.validate_published.evaluate import NOT_EXPRESSIBLE, PREDICTED, evaluate, summarise
from experiments.validate_published.kernels import parse_layer
from experiments.validate_published.mapping import CATEGORIES, load_mapping, plan_row
from experiments.validate_published.metrics import METRICS, error_pct, speed_bias_pct
from experiments.validate_published.modern import load_modern
from experiments.validate_published.published import COLUMNS, CSV_PATH, content_sha256, load_rows
from experiments.validate_published.report import CSV_COLUMNS, id_list
from experiments.validate_published.training import parse_ps, parse_step
from simcore.errors import TrainsimError
from topologies import load_cluster

# The reference file's SHA-256 with LF line endings (data/README.md records the same value).
REFERENCE_SHA256 = "c203e6da9884fb4f368448ea269623085097554091365e88a49360a89a77005d"
# Column names of the reference set, as its README lists them.
REFERENCE_COLUMNS = (
    "category", "hardware", "gpus", "nodes", "interconnect", "workload", "strategy", "metric",
    "value", "unit", "source",
)  # fmt: skip


def _quick() -> list[int | str]:
    """The rows ``--quick`` runs: the mapping's and the modern runs'."""
    return [*load_mapping().quick, *load_modern()[1]]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


# --- the copied rows ------------------------------------------------------------------------------


def test_copy_has_every_row_and_column_of_the_reference() -> None:
    rows = load_rows()
    assert len(rows) == 157
    assert [r.id for r in rows] == list(range(1, 158))
    assert COLUMNS == REFERENCE_COLUMNS
    with CSV_PATH.open(newline="", encoding="utf-8") as handle:
        assert tuple(next(csv.reader(handle))) == REFERENCE_COLUMNS
    assert content_sha256(CSV_PATH) == REFERENCE_SHA256
    assert REFERENCE_SHA256 in (CSV_PATH.parent / "README.md").read_text(encoding="utf-8")
    assert all(r.source.startswith("http") for r in rows)


# --- the mapping ----------------------------------------------------------------------------------


def test_every_row_has_a_plan_whose_metric_is_in_the_rows_unit() -> None:
    mapping = load_mapping()
    assert [p.row.id for p in mapping.plans] == list(range(1, 158 + 6))  # with data/added_rows.csv
    for plan in mapping.plans:
        assert plan.category in CATEGORIES
        if plan.setup is None:
            assert plan.reasons, plan.row.id
        else:
            assert plan.metric is not None and plan.metric.unit == plan.row.unit


def test_collective_categories_follow_the_message_size() -> None:
    for plan in load_mapping().plans:
        setup = plan.setup
        sizes = getattr(setup, "sizes", None)
        if plan.kind != "collective" or sizes is None:
            continue
        if getattr(setup, "band", ()):
            assert plan.category == "collective_topology_unknown"
        elif getattr(setup, "sweep", False) or sizes[0] >= 64 * 2**20:
            assert plan.category == "collective_large"
        elif sizes[0] <= 2**20:
            assert plan.category == "collective_small"


def test_topology_unknown_rows_are_scored_apart_with_the_band() -> None:
    """The H100 PCIe pair rows (31-33): no nvidia-smi topo in the source, so 1..3 NVLink bridges;
    predicted with three, the band spanning one bridge (82.4 GB/s as NCCL counts it) to three."""
    plans = {p.row.id: p for p in load_mapping().plans}
    plan = plans[31]
    assert plan.category == "collective_topology_unknown"
    assert plan.setup is not None and plan.metric is not None
    prediction = plan.setup.predict(plan.metric.name)
    three = plan_row(plan.row, {**_h100_pair_entry(), "topology": ["h100-pcie-nvlink-pair"]}, {})
    assert three.setup is not None and three.category == "collective_large"
    assert prediction.value == pytest.approx(three.setup.predict("busbw").value)
    one = plan_row(plan.row, {**_h100_pair_entry(), "topology": ["h100-pcie-nvlink-pair-1bridge"]}, {})
    assert one.setup is not None
    low = one.setup.predict("busbw").value
    assert 0.8 * 82.4 < low < 82.4  # one bridge: 4 links x 20.6 GB/s, less latency
    assert f"topology unknown: {low:.4g}..{prediction.value:.4g}" in prediction.setup


def _h100_pair_entry() -> dict[str, object]:
    return {
        "kind": "collective",
        "gpus": 2,
        "nodes": 1,
        "op": "all_reduce",
        "size": "1GiB",
        "metric": "busbw",
    }


def test_a_sweeps_average_busbw_is_the_mean_nccl_tests_prints() -> None:
    """nccl-tests' "# Avg bus bandwidth": the sum of every size's busbw over their count."""
    entry = {"topology": ["dgx-a100"], "gpus": 8, "nodes": 1, "op": "all_reduce", "sweep": ["1MiB", "4MiB"]}
    setup = parse(entry, "test", "one DGX A100")
    rows = rows_for(load_cluster("dgx-a100", gpus=8, nodes=1), "all_reduce", [1 << 20, 2 << 20, 4 << 20])
    by_hand = (rows[0].busbw_GBps + rows[1].busbw_GBps + rows[2].busbw_GBps) / 3
    prediction = setup.predict("busbw_avg")
    assert prediction.value == pytest.approx(by_hand, rel=1e-12)
    assert prediction.value < setup.predict("busbw_peak").value
    assert "mean over the 3 sizes" in prediction.setup


def test_every_row_is_predicted_or_listed_with_a_reason() -> None:
    results = evaluate(load_mapping().plans)
    assert len(results) == 157 + 6  # the reference set and data/added_rows.csv
    for r in results:
        assert r.status in (PREDICTED, NOT_EXPRESSIBLE)
        if r.status == PREDICTED:
            assert r.predicted is not None and math.isfinite(r.predicted) and r.predicted > 0
            assert r.error_pct == pytest.approx(100 * (r.predicted - r.measured) / r.measured)
            assert not r.reasons and r.setup
        else:
            assert r.reasons and all(isinstance(x, str) and x.strip() for x in r.reasons)
    summaries = summarise(results)
    assert sum(s.rows for s in summaries) == 157 + 6
    assert sum(s.predicted for s in summaries) == sum(r.status == PREDICTED for r in results)


def test_a_feature_not_listed_as_missing_is_an_error() -> None:
    row = load_rows()[100]
    entry = {"kind": "none", "category": "tensor_pipeline", "needs": ["warp-drive"]}
    with pytest.raises(TrainsimError, match="warp-drive"):
        plan_row(row, entry, {"tensor-parallel": "not modelled"})
    with pytest.raises(TrainsimError, match="unknown key 'gpu'"):
        plan_row(row, {"kind": "none", "category": "memory", "reason": "x", "gpu": 1}, {})


def test_a_metric_in_another_unit_than_the_row_is_an_error() -> None:
    row = load_rows()[0]  # a time in us
    entry = {"kind": "collective", "topology": ["dgx-a100"], "gpus": 8, "nodes": 1, "op": "all_reduce",
             "size": 8, "metric": "busbw"}  # fmt: skip
    with pytest.raises(TrainsimError, match="GB/s"):
        plan_row(row, entry, {})


# --- kinds no committed row uses yet (their presets are missing), on presets that exist ----------


def test_a_missing_preset_is_a_reason_naming_it() -> None:
    entry = {"topology": ["no-such-cluster"], "gpus": 16, "nodes": 2, "model": ["resnet50"],
             "strategy": "ddp", "dtype": "fp32", "micro_batch": 32, "optimizer": "sgd-momentum"}  # fmt: skip
    reasons = parse_step(entry, "test", "a cluster nobody built").missing()
    assert reasons == ["no topology preset for a cluster nobody built (looked for 'no-such-cluster')"]


def test_a_step_on_a_preset_predicts_consistent_metrics() -> None:
    entry = {"topology": ["dgx-a100"], "gpus": 16, "nodes": 2, "model": ["gpt2-small"], "seq_len": 1024,
             "strategy": "ddp", "dtype": "bf16", "micro_batch": 4, "optimizer": "adamw"}  # fmt: skip
    setup = parse_step(entry, "test", "")
    assert setup.missing() == []
    step = setup.predict("step_time_s").value
    tokens = setup.predict("tokens_per_s_per_gpu").value
    assert tokens == pytest.approx(4 * 1024 / step)
    efficiency = setup.predict("scaling_efficiency").value
    assert 0 < efficiency <= 100.0 + 1e-9
    assert setup.predict("tflops_per_gpu").value > 0


def test_a_step_names_its_precision_mode_and_a_low_reduce_dtype_moves_fewer_bytes() -> None:
    entry = {"topology": ["a100-roce-400g"], "gpus": 16, "nodes": 2, "model": ["gpt2-small"], "seq_len": 1024,
             "strategy": "hsdp", "dtype": "bf16", "micro_batch": 4, "optimizer": "adamw"}  # fmt: skip
    fp32_reduce = parse_step({**entry, "precision": "fsdp-mp"}, "test", "")
    bf16_reduce = parse_step({**entry, "precision": "fsdp-mp-low"}, "test", "")
    assert "precision fsdp-mp-low" in bf16_reduce.describe()
    assert bf16_reduce.predict("step_time_s").value <= fp32_reduce.predict("step_time_s").value
    with pytest.raises(TrainsimError, match="precision 'fp64'"):
        parse_step({**entry, "precision": "fp64"}, "test", "")


def test_a_layer_with_eager_attention_is_slower_than_fused() -> None:
    entry = {"device": ["a100-sxm-80gb"], "model": ["gpt2-medium"], "dtype": "fp16", "batches": [16],
             "seq_lens": [1024], "hidden": 1024}  # fmt: skip
    fused = parse_layer({**entry, "attention": "flash"}, "test", "").predict("layer_tflops").value
    eager = parse_layer({**entry, "attention": "eager"}, "test", "")
    assert "eager attention" in eager.describe()
    assert eager.predict("layer_tflops").value < fused
    with pytest.raises(TrainsimError, match="attention 'slow'"):
        parse_layer({**entry, "attention": "slow"}, "test", "")


def test_a_parameter_server_mode_predicts_per_worker_throughput() -> None:
    entry = {"topology": ["dgx-a100"], "gpus": 2, "model": ["resnet50-cifar10"], "mode": "ps-sync",
             "dtype": "fp32", "micro_batch": 32, "optimizer": "sgd-momentum"}  # fmt: skip
    setup = parse_ps(entry, "test", "")
    assert setup.missing() == []
    assert setup.predict("samples_per_s_per_worker").value > 0


def test_workers_of_several_gpus_push_once_and_count_every_gpus_samples() -> None:
    entry = {"topology": ["gtx980-1gbe"], "gpus": 4, "model": ["resnet50-cifar10"], "mode": "ps-sync",
             "dtype": "fp32", "micro_batch": 32, "optimizer": "sgd-momentum"}  # fmt: skip
    per_gpu = parse_ps(entry, "test", "")
    per_machine = parse_ps({**entry, "gpus_per_worker": 2}, "test", "")
    assert per_machine.workers == 2 and "2 workers of 2 GPUs" in per_machine.describe()
    # each worker's step counts both GPUs' samples (x2) and, bound by the 1 GbE exchange, each
    # machine pushes once instead of twice: more than twice the per-GPU worker's speed
    speed = per_machine.predict("samples_per_s_per_worker").value
    assert speed > 2.5 * per_gpu.predict("samples_per_s_per_worker").value
    with pytest.raises(TrainsimError, match="workers of 4 GPUs"):
        parse_ps({**entry, "gpus": 6, "gpus_per_worker": 4}, "test", "")


# --- the command line -----------------------------------------------------------------------------


def test_quick_json_has_the_quick_rows_and_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(_run(capsys, "--quick", "--format", "json"))
    quick = set(_quick())
    assert doc["format"] == "trainsim-validate-published"
    assert {r["id"] for r in doc["rows"]} == quick
    assert doc["rows_total"] == len(quick) == doc["predicted"] + doc["not_expressible"]
    assert doc["predicted"] >= 1
    scored = {r["category"] for r in doc["rows"] if r["role"] == "scored"}
    apart = {"calibration rows"} if any(r["role"] == "calibration" for r in doc["rows"]) else set()
    assert {c["category"] for c in doc["categories"]} == scored | apart
    for row in doc["rows"]:
        assert set(row) >= set(CSV_COLUMNS)
        assert (row["status"] == "predicted") == (row["predicted"] is not None) == (not row["reasons"])


def test_quick_text_and_markdown_carry_the_same_rows(capsys: pytest.CaptureFixture[str]) -> None:
    text = _run(capsys, "--quick")
    md = _run(capsys, "--quick", "--format", "md")
    assert text.startswith("trainsim vs published GPU measurements:")
    assert "## Summary per category" in md and "## Not expressible" in md
    for plan_id in _quick():
        assert f"| {plan_id} |" in md


def test_category_filter_keeps_only_that_category(capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(_run(capsys, "--category", "single_gpu_kernels,memory", "--format", "json"))
    assert {r["category"] for r in doc["rows"]} == {"single_gpu_kernels", "memory"}


def test_out_writes_the_report_and_refuses_a_non_empty_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "published"
    _run(capsys, "--quick", "--out", str(out))
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_FILES)
    lines = list(csv.reader(io.StringIO((out / "comparison.csv").read_text(encoding="utf-8"))))
    assert tuple(lines[0]) == CSV_COLUMNS and len(lines) == 1 + len(_quick())
    provenance = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    assert {"date", "git_commit", "command", "versions", "published_csv_sha256"} <= set(provenance)
    assert provenance["command"].endswith(f"--quick --out {out}")
    assert "## Provenance" in (out / "report.md").read_text(encoding="utf-8")
    assert "not empty" in _fails(capsys, "--quick", "--out", str(out))
    _run(capsys, "--quick", "--out", str(out), "--force")


def test_nothing_is_written_without_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _run(capsys, "--quick")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--format", "xml"), "--format"),
        (("--category", "gpu_magic"), "--category"),
        (("--force",), "--force"),
        (("--no-such-flag",), "unrecognized"),
    ],
)
def test_bad_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    assert says in _fails(capsys, *argv)


def test_out_that_is_a_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("x", encoding="utf-8")
    assert "is a file" in _fails(capsys, "--quick", "--out", str(target))


# --- invariants -----------------------------------------------------------------------------------

_positive = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(predicted=_positive, measured=_positive, name=st.sampled_from(sorted(METRICS)))
def test_speed_bias_says_faster_exactly_when_the_prediction_is_faster(
    predicted: float, measured: float, name: str
) -> None:
    metric = METRICS[name]
    bias, error = speed_bias_pct(metric, predicted, measured), error_pct(predicted, measured)
    faster = predicted > measured if metric.higher_is_faster else predicted < measured
    if predicted != measured:
        assert (bias > 0) == faster
        assert (error > 0) == (predicted > measured)


@given(st.lists(st.integers(min_value=1, max_value=200), unique=True, min_size=1))
def test_row_ranges_list_exactly_the_rows(ids: list[int]) -> None:
    ordered = sorted(ids)
    listed: list[int] = []
    for part in id_list(ordered).split(", "):
        low, _, high = part.partition("-")
        listed += range(int(low), int(high or low) + 1)
    assert listed == ordered
