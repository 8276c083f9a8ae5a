"""The planner's search space: GPU counts, the global batch, layouts and the memory floor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.planner.evaluate import PlanJob, evaluate_tasks
from simcore.planner.space import (
    DEFAULT_TOKENS_PER_STEP,
    Layout,
    SearchSpace,
    layouts_for,
    memory_floor_bytes,
    parse_gpu_counts,
    resolve_global_batch,
)
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from topologies import load_cluster


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


def test_layouts_split_the_batch_and_hsdp_needs_whole_nodes() -> None:
    space = SearchSpace(max_micro_batch=4)
    layouts, why = layouts_for(space, 12, 96, node_size=8)
    assert not why
    assert {layout.micro_batch for layout in layouts} == {1, 2, 4}
    assert "hsdp" not in {layout.strategy for layout in layouts}
    assert len(layouts) == 5 * 3 * 2
    assert layouts_for(space, 16, 100, node_size=8) == (
        [],
        "the global batch of 100 does not split evenly over 16 GPUs",
    )
    none, why = layouts_for(SearchSpace(micro_batches=(3,)), 8, 64, node_size=8)
    assert not none
    assert "no micro-batch size divides the 8 samples per GPU" in why
    assert Layout("fsdp", 2, True).label() == "fsdp mb=2 +recompute"


def test_search_space_refuses_nonsense() -> None:
    with pytest.raises(TrainsimError, match="synchronous strategies only; 'ps-async'"):
        SearchSpace(strategies=("ps-async",))
    with pytest.raises(TrainsimError, match="--max-micro-batch and --max-tp"):
        SearchSpace(max_tp=0)


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from(["gpt2-small", "bert-base", "resnet50-cifar10"]),
    strategy=st.sampled_from(["ddp", "fsdp", "zero1", "zero2", "zero3", "hsdp"]),
    gpus=st.sampled_from([1, 8, 16]),
    micro_batch=st.sampled_from([1, 4]),
    recompute=st.booleans(),
    accumulation=st.integers(1, 3),
)
def test_the_memory_floor_never_exceeds_the_peak(
    model: str, strategy: str, gpus: int, micro_batch: int, recompute: bool, accumulation: int
) -> None:
    """Layouts are skipped on the floor alone, so it must be a true lower bound of the step's peak."""
    workload = load_workload(model)
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation, seq_len=workload.tokens_per_sample or None
    )
    layout = Layout(strategy, micro_batch, recompute)
    job = PlanJob(workload, "dgx-a100", load_cluster, config, key=f"floor-{model}-{gpus}")
    (outcome,) = evaluate_tasks(job, [(gpus, layout)])
    assert outcome.report is not None, outcome.error
    floor = memory_floor_bytes(workload, config, layout, gpus, node_size=8)
    assert floor <= outcome.report.peak_memory_bytes * (1 + 1e-12)
