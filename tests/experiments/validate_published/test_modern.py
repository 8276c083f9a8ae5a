"""The modern runs (``data/modern_runs.csv`` through ``data/modern.yaml``) as their own categories.

Nothing here pins a predicted number: the tests check the copy, the layout parser, that every
setting goes through the one table (a blocked setting is the row's reason, deleting its ``needs``
line enables it), and that a predicted row's metric is what the simulator's report gives.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.validate_published.cli import main
from experiments.validate_published.evaluate import PREDICTED, evaluate
from experiments.validate_published.modern import (
    MODERN_CSV,
    MODERN_TABLE,
    ModernSetup,
    load_modern,
    load_table,
    modern_plan,
    parse_layout,
    reserved_bytes,
)
from experiments.validate_published.published import content_sha256
from experiments.validate_published.report import id_list
from simcore.errors import TrainsimError
from simcore.parallel import ParallelOptions, simulate_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from topologies import load_cluster

# SHA-256 (LF line endings) of the reference modern_runs.csv the copy was taken from
REFERENCE_SHA256 = "8cf97317511c05f259e71ae36979bd60d9267181f862399c5ab36032a25dcc46"


def _rows() -> dict[str, dict[str, str]]:
    with MODERN_CSV.open(newline="", encoding="utf-8") as handle:
        return {r["id"]: r for r in csv.DictReader(handle)}


def test_the_copy_is_the_reference_file_with_its_sources() -> None:
    assert content_sha256(MODERN_CSV) == REFERENCE_SHA256
    rows = _rows()
    assert len(rows) == 36 and all(r["source"].startswith("https://") for r in rows.values())


def test_a_layout_value_may_hold_spaces_and_degrees_must_be_positive() -> None:
    pairs = parse_layout(
        "dp=8 tp=1 pp=1 cp=1 ep=1 vpp=1 sp=off mbs=4 recompute=not stated compile=off fp8=on", "t"
    )
    assert pairs["recompute"] == "not stated" and pairs["fp8"] == "on" and pairs["mbs"] == "4"
    with pytest.raises(TrainsimError, match="lacks vpp"):
        parse_layout("dp=8 tp=1 pp=1 cp=1 ep=1 sp=off mbs=4 recompute=full compile=off fp8=on", "t")
    with pytest.raises(TrainsimError, match="tp='x'"):
        parse_layout("dp=8 tp=x pp=1 cp=1 ep=1 vpp=1 sp=off mbs=4 recompute=full compile=off fp8=on", "t")


def test_every_row_is_planned_in_its_category_with_the_tables_needs() -> None:
    plans, quick = load_modern()
    assert len(plans) == 36 and set(quick) <= {p.row.id for p in plans}
    table = load_table()
    needs = {s.needs for s in table.settings.values() if s.needs and not s.approximate}
    for plan in plans:
        assert plan.category == ("modern_runs_memory" if plan.row.unit == "GiB" else "modern_runs")
        assert all(reason.removeprefix("needs ") in needs for reason in plan.all_reasons())
    by_id = {p.row.id: p for p in plans}
    # every lever the rows use is in this build: nothing is blocked by a missing flag any more
    assert not [p.row.id for p in plans if p.all_reasons()]
    assert ("fp8", "delayed") in by_id["modern-28"].setup.config  # NeMo: Transformer Engine's recipe
    assert ("compile", True) in by_id["modern-28"].setup.config  # Megatron-Core's fused kernels
    assert ("recompute", "selective-op") in by_id["modern-01"].setup.options
    assert ("tp_comm_overlap", True) in by_id["modern-18"].setup.options


def test_a_frameworks_recipe_settings_override_the_layout_column(tmp_path: Path) -> None:
    by_id = {p.row.id: p for p in load_modern()[0]}
    options = {row: dict(by_id[row].setup.options) for row in ("modern-29", "modern-30", "modern-34")}
    # NeMo-Framework-Launcher 24.07: gpt3/20b and llama2_70b run sequence parallelism with TP comm
    # overlap, gpt3/175b sequence parallelism only; the rows' layout column says sp=off
    assert options["modern-29"]["sequence_parallel"] and options["modern-29"]["tp_comm_overlap"]
    assert options["modern-34"]["sequence_parallel"] and options["modern-34"]["tp_comm_overlap"]
    assert options["modern-30"]["sequence_parallel"] and not options["modern-30"].get("tp_comm_overlap")
    text = MODERN_TABLE.read_text(encoding="utf-8").replace("[sp=on, asynctp=on]", "[sp=sometimes]", 1)
    (tmp_path / "modern.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(TrainsimError, match="sp=sometimes"):
        load_table(tmp_path / "modern.yaml")


def test_llama_405b_rows_take_torchtitans_uneven_split_of_126_blocks() -> None:
    by_id = {p.row.id: p for p in load_modern()[0]}
    # generate_split_points: first stage 126 // stages, middle stages one more while the remainder
    # lasts, the last stage the rest
    assert by_id["modern-22"].setup.layout.stage_layers == (7, *[8] * 14, 7)
    assert by_id["modern-20"].setup.layout.stage_layers == (15, *[16] * 6, 15)
    assert by_id["modern-22"].all_reasons() == [] and by_id["modern-23"].all_reasons() == []


def _table_without_needs(tmp_path: Path, *settings: str) -> Path:
    """The shipped table with the ``needs`` line of each of ``settings`` deleted."""
    lines, current = [], ""
    for line in MODERN_TABLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            current = line.strip().split(":")[0]
        if current in settings and line.strip().startswith("needs:"):
            continue
        lines.append(line)
    path = tmp_path / "modern.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_deleting_a_needs_line_applies_the_settings_fields(tmp_path: Path) -> None:
    table = load_table(_table_without_needs(tmp_path, "recompute=selective-op"))
    plan = modern_plan(_rows()["modern-01"], table)
    assert plan.all_reasons() == []
    assert isinstance(plan.setup, ModernSetup) and ("recompute", "selective-op") in plan.setup.options
    # run with it: a prediction where the build has the mode, else a refusal naming it (never dropped)
    (result,) = evaluate([plan])
    assert result.status == PREDICTED or "selective-op" in "; ".join(result.reasons)


def test_an_enabled_field_the_build_lacks_is_a_refusal_naming_it(tmp_path: Path) -> None:
    table = load_table(_table_without_needs(tmp_path, "precision=FP8 (Transformer Engine)"))
    (result,) = evaluate([modern_plan(_rows()["modern-32"], table)])
    if result.status != PREDICTED:  # until --fp8 lands, the training config has no 'fp8' field
        assert "no field 'fp8'" in "; ".join(result.reasons)


def test_a_predicted_row_is_the_reports_tokens_per_second_per_gpu() -> None:
    table = load_table()
    row = {**_rows()["modern-01"]}
    row["layout"] = row["layout"].replace("recompute=selective-op", "recompute=full")
    plan = modern_plan(row, table)
    (result,) = evaluate([plan])
    assert result.status == PREDICTED and result.predicted is not None
    # the row's 500 W board limit and torchtitan's loop (a loss read every 10th step) are applied
    config = TrainingConfig(
        global_batch=16, micro_batch=2, seq_len=8192, dtype="bf16", optimizer="adamw",
        power_limit_w=500, host_syncs_per_step=0.1,
    )  # fmt: skip
    assert isinstance(plan.setup, ModernSetup)
    report = simulate_parallel_step(
        load_workload("llama3-8b", seq_len=8192, dtype="bf16"), config, load_cluster("hgx-h100-96gb", gpus=8, nodes=1),
        "fsdp", plan.setup.layout, ParallelOptions(recompute="full"), cluster="hgx-h100-96gb", trace=False,
    ).report  # fmt: skip
    assert result.predicted == pytest.approx(16 * 8192 / report.step_time_s / 8, rel=1e-9)
    assert ("power_limit_w", 500) in plan.setup.config
    assert not any("power limit is not applied" in n for n in result.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"layout": "dp=4 tp=1 pp=1 cp=1 ep=1 vpp=1 sp=off mbs=2 recompute=full compile=off fp8=off"},
            "not gpus",
        ),
        (
            {"layout": "dp=8 tp=1 pp=1 cp=1 ep=1 vpp=1 sp=maybe mbs=2 recompute=full compile=off fp8=off"},
            "sp=maybe",
        ),
        ({"hardware": "TPU v5p"}, "hardware 'TPU v5p'"),
        ({"workload": "Llama 9 pre-training"}, "Llama 9"),
    ],
)
def test_a_row_the_table_cannot_place_is_one_error_naming_it(change: dict[str, str], message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        modern_plan({**_rows()["modern-01"], **change}, load_table())


def test_the_cli_reports_the_modern_categories(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--category", "modern_runs,modern_runs_memory", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows_total"] == 36
    assert {c["category"] for c in doc["categories"]} == {"modern_runs", "modern_runs_memory"}
    assert all(r["status"] == PREDICTED or r["reasons"] for r in doc["rows"])


def test_named_row_ids_are_listed_in_runs() -> None:
    ids: list[int | str] = [1, 2, 3, 7, "modern-03", "modern-04", "modern-05", "modern-07", "modern-10"]
    assert id_list(ids) == "1-3, 7, modern-03-05, modern-07, modern-10"


def test_torchtitans_memory_is_the_reserved_peak_without_context_and_nccl() -> None:
    """Tensors 30 GiB, fragmentation 7% on them, a 1.5 GiB CUDA context + NCCL share: the report's
    peak is 33.6 GiB and torch.cuda.max_memory_reserved (what torchtitan logs) 32.1."""
    gib = 2**30
    breakdown = {"params": 10 * gib, "activations": 20 * gib, "overhead": (1.5 + 0.07 * 30) * gib}
    report = SimpleNamespace(memory_breakdown=breakdown, peak_memory_bytes=sum(breakdown.values()))
    assert report.peak_memory_bytes / gib == pytest.approx(33.6)
    assert reserved_bytes(report, 0.07) / gib == pytest.approx(32.1)
    assert reserved_bytes(report, 0.0) / gib == pytest.approx(30.0)  # no fragmentation: tensors only
