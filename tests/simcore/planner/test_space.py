"""The planner's search space: GPU counts, the global batch, the axes, candidates and labels."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.parallel.layout import ParallelLayout
from simcore.parallel.options import ParallelOptions
from simcore.planner.space import (
    DEFAULT_TOKENS_PER_STEP,
    PlanLayout,
    SearchSpace,
    _divisors,
    data_parallel_axes,
    layouts_for,
    max_micro_batch,
    parse_gpu_counts,
    resolve_global_batch,
    search_axes,
)
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("64,128,256", (64, 128, 256)),
        ("64..1024", (64, 128, 256, 512, 1024)),
        ("64:1024:x2", (64, 128, 256, 512, 1024)),
        ("8:32:8", (8, 16, 24, 32)),
        ("8,16,4..16", (4, 8, 16)),
        ("3..10", (3, 6)),
    ],
)
def test_gpu_counts(text: str, counts: tuple[int, ...]) -> None:
    assert parse_gpu_counts(text) == counts


@pytest.mark.parametrize("text", ["", "0", "a..b", "64..8", "8:64:x1", "8:64:0", "8;16"])
def test_bad_gpu_counts(text: str) -> None:
    with pytest.raises(TrainsimError, match="--gpus"):
        parse_gpu_counts(text)


def test_global_batch_from_tokens_and_defaults() -> None:
    llama = load_workload("llama2-7b", seq_len=4096)
    assert resolve_global_batch(llama, global_batch=None, tokens_per_step=None, seq_len=4096) == (
        DEFAULT_TOKENS_PER_STEP // 4096
    )
    assert resolve_global_batch(llama, global_batch=None, tokens_per_step=2**21, seq_len=4096) == 512
    assert resolve_global_batch(llama, global_batch=512, tokens_per_step=2**21, seq_len=4096) == 512
    with pytest.raises(TrainsimError, match="contradicts --tokens-per-step"):
        resolve_global_batch(llama, global_batch=100, tokens_per_step=2**21, seq_len=4096)
    with pytest.raises(TrainsimError, match="not a whole number of sequences"):
        resolve_global_batch(llama, global_batch=None, tokens_per_step=1000, seq_len=4096)
    resnet = load_workload("resnet50")
    with pytest.raises(TrainsimError, match="needs a language model"):
        resolve_global_batch(resnet, global_batch=None, tokens_per_step=4096, seq_len=None)


GPT2 = load_workload("gpt2-small")  # 12 blocks, 12 heads, ffn 3072


def _labels(space: SearchSpace, gpus: int, batch: int, workload: Workload = GPT2) -> list[str]:
    layouts, why = layouts_for(space, search_axes(space, workload, 8), workload, gpus, batch, node_size=8)
    assert not why, why
    return sorted(layout.label(gpus) for layout in layouts)


def test_the_exact_candidates_of_a_small_space() -> None:
    """16 GPUs in nodes of 8, 12 blocks, tp and pp up to 2, vpp up to 2, 32 samples: counted by hand.

    (tp, pp) = (1, 1): both strategies; (2, 1): both, with sequence parallelism; (1, 2) and (2, 2):
    DDP only (pipelines run with DDP or ZeRO-1), 1F1B, ZB-H1 and 1F1B interleaved over 2 chunks
    (12 blocks divide into 2 x 2 stages; 32 / dp / mb micro-batches divide by pp)."""
    space = SearchSpace(strategies=("ddp", "zero3"), micro_batches=(1,), recompute=("none",),
                        max_tp=2, max_pp=2, max_vpp=2)  # fmt: skip
    assert _labels(space, 16, 32) == sorted([
        "ddp mb=1", "zero3 mb=1",
        "ddp dp8 tp2 mb=1 sp", "zero3 dp8 tp2 mb=1 sp",
        "ddp dp8 pp2 mb=1", "ddp dp8 pp2 mb=1 schedule=zb-h1", "ddp dp8 pp2 vpp2 mb=1",
        "ddp dp4 tp2 pp2 mb=1 sp", "ddp dp4 tp2 pp2 mb=1 schedule=zb-h1 sp", "ddp dp4 tp2 pp2 vpp2 mb=1 sp",
    ])  # fmt: skip


def test_pipelines_run_with_the_pipeline_strategies() -> None:
    space = SearchSpace(strategies=("zero1", "fsdp"), micro_batches=(1,), recompute=("none",), tp=(1,), pp=(2,),
                        vpp=(1,), schedules=("1f1b",))  # fmt: skip
    assert _labels(space, 8, 16) == ["zero1 dp4 pp2 mb=1"]
    wide = replace(space, pipeline_strategies=("zero1", "fsdp"))
    assert _labels(wide, 8, 16) == ["fsdp dp4 pp2 mb=1", "zero1 dp4 pp2 mb=1"]
    with pytest.raises(TrainsimError, match="'zero4' is not one of"):
        SearchSpace(pipeline_strategies=("zero4",))


def test_default_axes_come_from_the_cluster_and_the_model() -> None:
    axes = search_axes(SearchSpace(), GPT2, node_size=8)
    assert axes.tp == (1, 2, 4)  # 8 does not divide 12 heads
    assert axes.pp == (1, 2, 3, 4, 6, 12)  # divisors of 12 blocks
    assert (axes.cp, axes.ep, axes.vpp) == ((1,), (1,), (1, 2, 4))
    assert search_axes(SearchSpace(), GPT2, node_size=4).tp == (1, 2, 4)
    assert search_axes(SearchSpace(), GPT2, node_size=2).tp == (1, 2)
    assert search_axes(SearchSpace(max_pp=1), GPT2, node_size=8).vpp == (1,)  # no pipeline, no chunks
    long = load_workload("llama2-7b", seq_len=16384)
    assert search_axes(SearchSpace(), long, 8).cp == (1, 2, 4, 8)
    assert search_axes(SearchSpace(), load_workload("llama2-7b", seq_len=4096), 8).cp == (1,)
    assert search_axes(SearchSpace(), load_workload("mixtral-8x7b", seq_len=1024), 8).ep == (1, 2, 4, 8)
    assert search_axes(SearchSpace(), long, 8).ep == (1,)
    cnn = search_axes(SearchSpace(), load_workload("resnet50"), 8)
    assert (cnn.tp, cnn.pp, cnn.cp, cnn.ep, cnn.vpp) == ((1,), (1,), (1,), (1,), (1,))


@pytest.mark.parametrize(
    ("kwargs", "axis", "degrees"),
    [
        ({"max_tp": 2}, "tp", (1, 2)),
        ({"max_pp": 4}, "pp", (1, 2, 3, 4)),
        ({"max_vpp": 2}, "vpp", (1, 2)),
        ({"tp": (4, 2)}, "tp", (2, 4)),
        ({"pp": (3,)}, "pp", (3,)),
        ({"vpp": (2,)}, "vpp", (2,)),
    ],
)
def test_each_degree_flag_bounds_or_fixes_its_axis(
    kwargs: dict[str, Any], axis: str, degrees: tuple[int, ...]
) -> None:
    assert getattr(search_axes(SearchSpace(**kwargs), GPT2, 8), axis) == degrees


def test_cp_and_ep_caps() -> None:
    long = load_workload("llama2-7b", seq_len=16384)
    assert search_axes(SearchSpace(max_cp=2), long, 8).cp == (1, 2)
    assert search_axes(SearchSpace(max_cp=4), GPT2, 8).cp == (1, 2, 4)
    moe = load_workload("mixtral-8x7b", seq_len=1024)
    assert search_axes(SearchSpace(max_ep=2), moe, 8).ep == (1, 2)
    assert search_axes(SearchSpace(ep=(4,)), moe, 8).ep == (4,)


def test_options_flags_change_the_candidates() -> None:
    base: dict[str, Any] = {"strategies": ("ddp",), "micro_batches": (1,), "recompute": ("none",), "tp": (2,), "pp": (2,),
            "vpp": (1,)}  # fmt: skip
    assert _labels(SearchSpace(**base, schedules=("1f1b",)), 8, 16) == ["ddp dp2 tp2 pp2 mb=1 sp"]
    assert _labels(SearchSpace(**base, schedules=("gpipe",)), 8, 16) == [
        "ddp dp2 tp2 pp2 mb=1 schedule=gpipe sp"
    ]
    both = _labels(SearchSpace(**base, schedules=("1f1b",), sequence_parallel=(False, True)), 8, 16)
    assert both == ["ddp dp2 tp2 pp2 mb=1", "ddp dp2 tp2 pp2 mb=1 sp"]
    modes = _labels(
        SearchSpace(**{**base, "recompute": ("selective", "every-2")}, schedules=("1f1b",)), 8, 16
    )
    assert modes == [
        "ddp dp2 tp2 pp2 mb=1 recompute=every-2 sp",
        "ddp dp2 tp2 pp2 mb=1 recompute=selective sp",
    ]


@pytest.mark.parametrize(
    ("field", "default", "given"), [("ring_kv", "grouped", "repeated"), ("ring_merge", "fused", "eager")]
)
def test_ring_attention_levers_reach_every_candidate(field: str, default: str, given: str) -> None:
    """--ring-kv and --ring-merge are run-wide: every layout priced carries them (their defaults
    unless given)."""
    base: dict[str, Any] = {"strategies": ("ddp",), "micro_batches": (1,), "recompute": ("none",), "cp": (2,),
            "tp": (1,), "pp": (1,)}  # fmt: skip
    for space, want in ((SearchSpace(**base), default), (SearchSpace(**base, **{field: given}), given)):
        layouts, why = layouts_for(space, search_axes(space, GPT2, 8), GPT2, 8, 16, node_size=8)
        assert layouts and not why and {getattr(lay.options, field) for lay in layouts} == {want}


def test_micro_batches_split_the_replica_batch_and_hsdp_needs_whole_nodes() -> None:
    space = SearchSpace(max_micro_batch=4, recompute=("none", "full"))
    axes = data_parallel_axes(GPT2)
    layouts, why = layouts_for(space, axes, GPT2, 12, 96, node_size=8)
    assert not why
    assert {layout.micro_batch for layout in layouts} == {1, 2, 4}
    assert "hsdp" not in {layout.strategy for layout in layouts}
    assert len(layouts) == 5 * 3 * 2
    assert layouts_for(space, axes, GPT2, 16, 100, node_size=8) == (
        [],
        "the global batch of 100 does not split evenly over 16 replicas",
    )
    none, why = layouts_for(SearchSpace(micro_batches=(3,)), axes, GPT2, 8, 64, node_size=8)
    assert not none
    assert "no micro-batch size divides the 8 samples per replica" in why
    # the default largest micro-batch holds 16k tokens (32 samples at most)
    assert max_micro_batch(SearchSpace(), load_workload("llama2-7b", seq_len=4096)) == 4
    assert max_micro_batch(SearchSpace(), GPT2) == 16
    assert max_micro_batch(SearchSpace(), load_workload("resnet50")) == 32
    assert max_micro_batch(SearchSpace(max_micro_batch=64), GPT2) == 64


def test_interleaving_needs_micro_batches_divisible_by_pp() -> None:
    space = SearchSpace(
        strategies=("ddp",), micro_batches=(1, 2), recompute=("none",), tp=(1,), pp=(2,), vpp=(2,)
    )
    # 8 GPUs, pp 2: dp 4. 32 samples: 8 per replica, mb 1 -> 8 micro-batches, mb 2 -> 4 (both even)
    assert _labels(space, 8, 32) == ["ddp dp4 pp2 vpp2 mb=1", "ddp dp4 pp2 vpp2 mb=2"]
    # 24 samples: 6 per replica, mb 1 -> 6 (even), mb 2 -> 3 (odd)
    assert _labels(space, 8, 24) == ["ddp dp4 pp2 vpp2 mb=1"]
    # 12 samples: 3 per replica, mb 1 -> 3 (odd), mb 2 does not divide 3
    layouts, why = layouts_for(space, search_axes(space, GPT2, 8), GPT2, 8, 12, 8)
    assert layouts == [] and why == "no micro-batch size divides the 3 samples per replica"


def test_labels_name_layouts_as_the_what_if_does() -> None:
    layout = PlanLayout("zero1", 1, ParallelLayout(tp=8, pp=4, vpp=2))
    assert layout.label(1024) == "zero1 dp32 tp8 pp4 vpp2 mb=1"
    assert (
        PlanLayout("fsdp", 2, options=ParallelOptions(recompute="full")).label(64)
        == "fsdp mb=2 recompute=full"
    )
    odd = PlanLayout("ddp", 4, ParallelLayout(tp=2, pp=2, cp=2), ParallelOptions(
        schedule="zb-h1", sequence_parallel=True, recompute="selective", offload="optimizer"))  # fmt: skip
    assert odd.label(16) == "ddp dp2 tp2 pp2 cp2 mb=4 recompute=selective offload=optimizer schedule=zb-h1 sp"
    record = odd.to_record(16)
    assert record == {"label": odd.label(16), "strategy": "ddp", "micro_batch": 4, "dp": 2, "tp": 2, "pp": 2,
                      "cp": 2, "ep": 1, "vpp": 1, "schedule": "zb-h1", "sequence_parallel": True,
                      "tp_comm_overlap": False, "recompute": "selective", "offload": "optimizer"}  # fmt: skip
    assert (
        PlanLayout("ddp", 1).fast_path
        and PlanLayout("ddp", 1, options=ParallelOptions(recompute="full")).fast_path
    )
    assert not PlanLayout("ddp", 1, options=ParallelOptions(recompute="selective")).fast_path
    assert not PlanLayout("ddp", 1, ParallelLayout(tp=2)).fast_path


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategies": ("ps-async",)}, "synchronous strategies only; 'ps-async'"),
        ({"max_micro_batch": 0}, "--max-micro-batch must be between 1 and 65536"),
        ({"max_tp": 0}, "--max-tp must be at least 1, got 0"),
        ({"max_pp": -1}, "--max-pp must be at least 1"),
        ({"max_cp": 0}, "--max-cp must be at least 1"),
        ({"max_ep": 0}, "--max-ep must be at least 1"),
        ({"max_vpp": 0}, "--max-vpp must be at least 1"),
        ({"tp": (16,), "max_tp": 8}, "--tp 16 contradicts --max-tp 8"),
        ({"pp": (0,)}, "--pp degrees must be positive"),
        ({"recompute": ("sometimes",)}, "recompute 'sometimes' not understood"),
        ({"offload": ("disk",)}, "--offload: 'disk' is not known"),
        ({"schedules": ("1f1b", "zb-v")}, "--schedules: 'zb-v' is not known"),
        ({"schedules": ()}, "--schedules lists nothing"),
    ],
)
def test_search_space_refuses_nonsense(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        SearchSpace(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "model", "message"),
    [
        ({"tp": (5,)}, "gpt2-small", r"--tp 5: attention heads \(12\) are not divisible by tp \(5\)"),
        (
            {"pp": (5,)},
            "gpt2-small",
            "--pp 5: the model's 12 blocks do not divide into 5 equal pipeline stages",
        ),
        ({"pp": (24,)}, "gpt2-small", "--pp 24: the model's 12 blocks do not divide"),
        ({"ep": (2,)}, "gpt2-small", "--ep 2: ep 2 needs a mixture-of-experts model"),
        ({"ep": (16,)}, "mixtral-8x7b", r"--ep 16: experts \(8\) are not divisible by ep \(16\)"),
        ({"cp": (3,)}, "gpt2-small", r"--cp 3: sequence length \(1024\) is not divisible by 2 x cp = 6"),
        ({"tp": (2,)}, "resnet50", "--tp: model 'resnet50' has no transformer shape"),
        ({"vpp": (2,), "max_pp": 1}, "gpt2-small", "--vpp 2 needs pipeline parallelism"),
    ],
)
def test_degrees_the_model_cannot_take_are_refused(kwargs: dict[str, Any], model: str, message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        search_axes(
            SearchSpace(**kwargs), load_workload(model, seq_len=1024 if model != "resnet50" else None), 8
        )


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5000), cap=st.integers(1, 6000))
def test_micro_batch_divisors_are_every_divisor_up_to_the_cap(n: int, cap: int) -> None:
    assert _divisors(n, cap) == tuple(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def test_a_huge_batch_is_split_without_counting_to_it() -> None:
    assert _divisors(10**30, 8) == (1, 2, 4, 5, 8)
    assert _divisors(1_000_003, 2**20) == (1, 1_000_003)  # a prime: a thousand steps, not a million
