"""The rows the project added (data/added_rows.csv) and the Megatron FLOP count they are in."""

from __future__ import annotations

import pytest

from experiments.validate_published.mapping import load_mapping
from experiments.validate_published.published import ADDED_PATH, load_all_rows, load_rows
from experiments.validate_published.training import DATA, megatron_flops_per_step, parse_step
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload


def test_added_rows_follow_the_reference_set_with_sources() -> None:
    rows = load_all_rows()
    reference, added = load_rows(), load_rows(ADDED_PATH, 158)
    assert rows == reference + added and [r.id for r in added] == list(range(158, 164))
    assert all(
        r.category == "fsdp_zero" and r.source.startswith("https://arxiv.org/abs/2104.04473") for r in added
    )
    assert [r.value for r in added] == [144, 88, 44, 138, 98, 48]  # Table 2 of the paper


def test_every_added_row_is_a_predictable_zero3_step() -> None:
    plans = {p.row.id: p for p in load_mapping().plans}
    for number in range(158, 164):
        plan = plans[number]
        assert plan.category == "fsdp_zero" and plan.setup is not None and not plan.setup.missing()
        assert plan.setup.strategy == "zero3" and plan.setup.gpus == plan.row.gpus


def test_the_megatron_count_is_the_papers_eq3() -> None:
    """GPT 174.6B, batch 1536 x 2048 tokens: 96 B s l h^2 (1 + s/6h + V/16lh) by hand; the paper's
    144 teraFLOP/s on 384 GPUs then means a step of 81.6 s, which is the paper's other column: 90
    days for 300B tokens at 1536 x 2048 tokens a step is 90 x 86400 / (300e9 / 3145728) = 81.5 s."""
    workload = load_workload(str(DATA / "models" / "gpt3-175b-megatron.json"), seq_len=2048, dtype="fp16")
    b, s, depth, h, v = 1536, 2048, 96, 12288, 51200
    want = 96 * b * s * depth * h**2 * (1 + s / (6 * h) + v / (16 * depth * h))
    assert megatron_flops_per_step(workload, b) == pytest.approx(want)
    assert want / (384 * 144e12) == pytest.approx(90 * 86400 / (300e9 / (1536 * 2048)), rel=0.005)
    assert 174.4e9 < workload.params < 174.8e9  # "174.6" in the paper's Table 1
    big = load_workload(str(DATA / "models" / "mt-nlg-530b.json"), seq_len=2048, dtype="fp16")
    assert 529.4e9 < big.params < 529.8e9  # "529.6"


def test_the_2021_rows_run_deepspeeds_per_rank_lists() -> None:
    """The paper's ZeRO-3 runs (early 2021) predate DeepSpeed PR #1188 (October 2021)."""
    plans = {p.row.id: p for p in load_mapping().plans}
    assert all(plans[n].setup.zero3_per_rank_lists for n in range(158, 164))  # type: ignore[union-attr]


# a small ZeRO-3 step row, for the keys' checks
_ENTRY = {
    "topology": ["dgx-a100"], "gpus": 16, "nodes": 2, "model": ["gpt2-small"], "strategy": "zero3", "dtype": "fp16",
    "micro_batch": 1, "optimizer": "adamw",
}  # fmt: skip


def test_the_lists_switch_must_be_a_boolean() -> None:
    entry = {**_ENTRY, "zero3_per_rank_lists": "yes"}
    with pytest.raises(TrainsimError, match="'zero3_per_rank_lists' must be true or false"):
        parse_step(entry, "row 1", "A100")


def test_the_2021_rows_materialise_their_attention_scores() -> None:
    """No FlashAttention in 2021: the rows run eager attention, whose s x s scores a flash workload
    never stores, so each block's forward moves more bytes and holds more memory."""
    plans = {p.row.id: p for p in load_mapping().plans}
    for number in range(158, 164):
        setup = plans[number].setup
        assert setup.common.attention == "eager"  # type: ignore[union-attr]
        dims = setup.common.workload().dims  # type: ignore[union-attr]
        assert dims is not None and not dims.flash_attention


def test_a_step_rows_attention_is_one_of_the_known_modes() -> None:
    entry = {**_ENTRY, "attention": "sdpa"}
    with pytest.raises(TrainsimError, match="attention 'sdpa'; allowed: preset, flash, eager"):
        parse_step(entry, "row 1", "A100")
    flash = parse_step({**entry, "attention": "flash"}, "row 1", "A100").common.workload().dims
    eager = parse_step({**entry, "attention": "eager"}, "row 1", "A100").common.workload().dims
    assert flash is not None and flash.flash_attention and eager is not None and not eager.flash_attention
