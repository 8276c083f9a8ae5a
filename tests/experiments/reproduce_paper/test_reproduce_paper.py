"""``python -m experiments.reproduce_paper``: golden quick table, verdicts computed from the numbers.

Regenerate the golden file with
``TRAINSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_reproduce_paper.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.reproduce_paper.claims import (
    AGREES,
    CLAIMS,
    DISAGREES,
    PARTLY,
    QUICK_SETTING,
    UNTESTABLE,
    ClaimResult,
    PaperSetting,
    judge,
)
from experiments.reproduce_paper.cli import evaluate_fsdp_memory, main, render, run_claims
from experiments.reproduce_paper.hardware import (
    NVLINK_KINDS,
    allreduce_busbw_Bps,
    evaluate_nvlink_vs_pcie,
    forced_pcie,
)
from experiments.reproduce_paper.region import RegionSweep, claim_regions, format_regions
from tests.goldens import assert_golden

VERDICTS = {AGREES, PARTLY, DISAGREES, UNTESTABLE}


@pytest.fixture(scope="module")
def quick_results() -> list[ClaimResult]:
    return run_claims(QUICK_SETTING)


def test_quick_table_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    assert_golden("reproduce_paper_quick.txt", capsys.readouterr().out)


def test_every_claim_is_reported_once_with_a_computed_verdict(quick_results: list[ClaimResult]) -> None:
    assert [r.claim_id for r in quick_results] == list(CLAIMS)
    for result in quick_results:
        assert result.verdict in VERDICTS
        assert len(result.evidence) == len(result.labels)
        assert judge(CLAIMS[result.claim_id], result.evidence) == result.verdict


def test_ratio_evidence_agrees_with_the_printed_details(quick_results: list[ClaimResult]) -> None:
    """The evidence of a ratio claim is the ratio of the two numbers each detail line shows."""
    by_id = {r.claim_id: r for r in quick_results}
    for claim_id in ("ddp-vs-fsdp", "ddp-vs-1gpu"):
        result = by_id[claim_id]
        for value, line in zip(result.evidence, result.details, strict=False):
            left, right = line.split(": ", 1)[1].split(" samples/s")[0].split(" vs ")
            assert value == pytest.approx(
                float(left.replace(",", "")) / float(right.replace(",", "")), rel=1e-3
            )


def test_nvlink_verdict_follows_the_simulated_presets() -> None:
    """At the rates NCCL reaches (NVLink 80%, PCIe 76% of the line rate, and the A100's ~230 GB/s
    kernel limit), A100 NVSwitch is ~9.6x its forced-PCIe self and two H100s ~7.7x: both agree."""
    a100 = evaluate_nvlink_vs_pcie(replace(QUICK_SETTING, nvlink_presets=("dgx-a100",), nvlink_gpus=(2,)))
    h100 = evaluate_nvlink_vs_pcie(replace(QUICK_SETTING, nvlink_presets=("hgx-h100",), nvlink_gpus=(2,)))
    assert a100.evidence[0] == pytest.approx(230 / (31.5 * 0.762), rel=0.02)
    assert h100.evidence[0] == pytest.approx(450 * 0.824 / (63 * 0.762), rel=0.02)
    assert (a100.verdict, h100.verdict) == (AGREES, AGREES)


def test_fsdp_memory_verdict_depends_on_the_model() -> None:
    """ResNet-50's peak is activations (FSDP barely helps); VGG-16's is its 134 M parameters."""
    resnet = evaluate_fsdp_memory(replace(QUICK_SETTING, models=("resnet50-cifar10",)))
    vgg = evaluate_fsdp_memory(replace(QUICK_SETTING, models=("vgg16-cifar10",)))
    assert resnet.evidence[0] < 1.5 < vgg.evidence[0]
    assert (resnet.verdict, vgg.verdict) == (DISAGREES, PARTLY)


def test_forced_pcie_drops_nvlink_and_leaves_the_preset_alone() -> None:
    from topologies import load_cluster

    native = load_cluster("dgx-a100", gpus=8)
    edges = native.graph.number_of_edges()
    pcie = forced_pcie(native)
    assert native.graph.number_of_edges() == edges
    assert pcie.ranks == native.ranks
    assert not [e for e in pcie.graph.edges(data="kind") if e[2] in NVLINK_KINDS]
    assert "h0/nvswitch" not in pcie.graph
    assert allreduce_busbw_Bps(pcie, 1 << 28) < allreduce_busbw_Bps(native, 1 << 28) / 5


def test_json_and_markdown_carry_the_same_verdicts(quick_results: list[ClaimResult]) -> None:
    document = json.loads(render(quick_results, QUICK_SETTING, "json", quick=True))
    assert document["schema"] == "trainsim-reproduce-paper"
    assert [(c["id"], c["verdict"]) for c in document["claims"]] == [
        (r.claim_id, r.verdict) for r in quick_results
    ]
    assert all(c["assumptions"] for c in document["claims"])
    markdown = render(quick_results, QUICK_SETTING, "markdown", quick=True)
    for r in quick_results:
        assert f"| {r.claim_id} | {CLAIMS[r.claim_id].claimed} | **{r.verdict}** |" in markdown


def test_out_writes_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--format", "json", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["quick"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "reproduce_paper.json",
        "reproduce_paper.md",
        "reproduce_paper.txt",
    ]


def test_bad_format_exits_with_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["--format", "xml"])
    assert info.value.code == 2


# --- the rules themselves ---------------------------------------------------------------------------

ratio = st.floats(min_value=0.01, max_value=100.0, allow_nan=False)


@given(st.lists(st.floats(min_value=2.0, max_value=3.0), min_size=1, max_size=8))
def test_values_inside_the_claimed_range_agree(values: list[float]) -> None:
    assert judge(CLAIMS["ddp-vs-fsdp"], values) == AGREES


@given(st.lists(st.floats(min_value=0.5, max_value=1.4), min_size=1, max_size=8))
def test_no_effect_disagrees_with_a_claimed_speedup(values: list[float]) -> None:
    assert judge(CLAIMS["ddp-vs-fsdp"], values) == DISAGREES


@given(st.lists(ratio, min_size=1, max_size=8))
def test_up_to_looks_only_at_the_largest_value(values: list[float]) -> None:
    claim = CLAIMS["nvlink-10x"]
    assert judge(claim, values) == judge(claim, [max(values)])
    assert judge(claim, [*values, 10.0]) == (AGREES if max(values) <= 12.5 else judge(claim, [max(values)]))


@given(st.lists(st.booleans(), min_size=1, max_size=6))
def test_checks_agree_only_when_all_hold(flags: list[bool]) -> None:
    verdict = judge(CLAIMS["fabric-scaling"], [1.0 if f else 0.0 for f in flags])
    assert verdict == (AGREES if all(flags) else PARTLY if any(flags) else DISAGREES)


def test_negated_gain_and_empty_evidence() -> None:
    claim = CLAIMS["mitigated-negates"]
    assert judge(claim, [-0.5, 0.1]) == AGREES
    assert judge(claim, [0.1, 0.9]) == PARTLY
    assert judge(claim, [0.8]) == DISAGREES
    assert judge(claim, []) == UNTESTABLE


# --- where each claim holds ------------------------------------------------------------------------


def test_a_claims_region_is_where_its_rule_agrees_point_by_point() -> None:
    def step(setting: PaperSetting, cluster: str, model: str, strategy: str, gpus: int) -> SimpleNamespace:
        # DDP scales linearly from 100 samples/s; FSDP is 2x slower on "fast" and equal on "slow";
        # FSDP's peak memory is 1/gpus of DDP's (5x at 5 GPUs: the claim's 4-6x)
        rate = 100.0 * gpus / (2.0 if strategy == "fsdp" and cluster == "fast" else 1.0)
        memory = 1e9 / (gpus if strategy == "fsdp" else 1)
        return SimpleNamespace(samples_per_s=rate, peak_memory_bytes=memory)

    sweep = RegionSweep(clusters=("fast", "slow"), models=("m",), gpus=(1, 2, 3, 5))
    points = claim_regions(QUICK_SETTING, sweep, step)
    agrees = {(p.claim_id, p.cluster, p.gpus) for p in points if p.verdict == AGREES}
    assert {(c, g) for claim, c, g in agrees if claim == "ddp-vs-fsdp"} == {("fast", g) for g in (1, 2, 3, 5)}
    assert {g for claim, _, g in agrees if claim == "ddp-vs-1gpu"} == {2, 3}  # 2x and 3x; 5x is not
    assert {g for claim, _, g in agrees if claim == "fsdp-memory"} == {5}
    text = format_regions(points, QUICK_SETTING, sweep)
    assert "fast m: agrees at 1, 2, 3, 5 GPUs" in text and "slow m: agrees nowhere" in text
