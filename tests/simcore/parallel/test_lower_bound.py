"""The composed step's lower bound: never above the step, and the closed form it states."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.fp8 import compute_model
from simcore.compute.rank_spread import spread_ranks
from simcore.parallel.cache import ComposeCache
from simcore.parallel.comm import GroupPricer
from simcore.parallel.layout import ParallelLayout, Placement
from simcore.parallel.options import ParallelOptions
from simcore.parallel.pp import partition_stages
from simcore.parallel.stage import build_stage
from simcore.parallel.step import simulate_parallel_step, step_time_lower_bound
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import gating_device
from tests.simcore.parallel.support import cluster, small_gpt

GPUS = 16


def _bound(layout: ParallelLayout, options: ParallelOptions, strategy: str = "zero1", mb: int = 1) -> float:
    topology = cluster("dgx-a100", GPUS)
    config = TrainingConfig(global_batch=64, micro_batch=mb, seq_len=512)
    return step_time_lower_bound(small_gpt(8, tied=False), config, topology, strategy, layout, options)


def _step(layout: ParallelLayout, options: ParallelOptions, strategy: str = "zero1", mb: int = 1) -> float:
    topology = cluster("dgx-a100", GPUS)
    config = TrainingConfig(global_batch=64, micro_batch=mb, seq_len=512)
    result = simulate_parallel_step(
        small_gpt(8, tied=False), config, topology, strategy, layout, options, trace=False
    )
    return result.report.step_time_s


def test_the_bound_is_the_busiest_rank_with_the_fill_and_the_drain() -> None:
    """pp=2, 1F1B: max over ranks of (forwards of the ranks before it through their first chunk) +
    micro-batches x (its forward and backward) + (the backwards of the ranks before it), each pass
    the device seconds of the whole rank's stage model (every layer, not the bound's one per kind:
    kernels and the exposed tensor-parallel communication)."""
    workload = small_gpt(8, tied=False)
    layout, options = ParallelLayout(tp=2, pp=2), ParallelOptions()
    topology = cluster("dgx-a100", GPUS)
    config = TrainingConfig(global_batch=64, micro_batch=1, seq_len=512)
    device = gating_device(topology, config.dtype)
    timer = compute_model(
        device, config.dtype, None, config.fp8, ranks=spread_ranks(True, GPUS, explicit_speeds=False)
    )
    placement, pricer = Placement(layout, GPUS), GroupPricer(topology, None, "closed_form")
    micro = config.global_batch // (layout.dp(GPUS) * config.micro_batch)
    expected, fill, drain = 0.0, 0.0, 0.0
    for rank, layers in enumerate(partition_stages(workload, 2)):
        stage = build_stage(
            workload, rank, [layers], layout=layout, options=options, placement=placement, pricer=pricer,
            timer=timer, micro_batch=1,
        )  # fmt: skip
        # device seconds: a span of layers takes at least its kernels' (not each layer's wall time)
        f, b = (
            float(stage.timer.layer_parts_s(stage.workload, 1, phase)[0].sum()) for phase in ("fwd", "bwd")
        )
        assert f + b <= stage.chunk_time_s(0, "fwd", 1) + stage.chunk_time_s(0, "bwd", 1)
        assert stage.comm_s["tp"] > 0  # the tensor-parallel collectives are in the passes
        expected = max(expected, fill + micro * (f + b) + drain)
        fill, drain = fill + f, drain + b
    assert _bound(layout, options) == pytest.approx(expected, rel=1e-12)
    # ZB-H1 may end on a weight gradient: no drain
    zb = _bound(layout, replace(options, schedule="zb-h1"))
    assert zb < expected


def test_full_recompute_adds_a_forward_to_every_backward() -> None:
    layout = ParallelLayout(tp=2, pp=2)
    none, full = _bound(layout, ParallelOptions()), _bound(layout, ParallelOptions(recompute="full"))
    assert full > none * 1.2  # a forward is about a third of forward + backward


def test_pure_data_parallelism_has_no_bound() -> None:
    assert _bound(ParallelLayout(), ParallelOptions()) == 0.0


@settings(max_examples=12, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    vpp=st.sampled_from([1, 2]),
    schedule=st.sampled_from(["1f1b", "zb-h1", "gpipe"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    strategy=st.sampled_from(["ddp", "zero1"]),
    mb=st.sampled_from([1, 2]),
)
def test_the_bound_is_never_above_the_step(
    tp: int, pp: int, vpp: int, schedule: str, recompute: str, strategy: str, mb: int
) -> None:
    if tp == pp == 1 or (pp == 1 and vpp > 1) or (vpp > 1 and schedule != "1f1b"):
        return
    layout = ParallelLayout(tp=tp, pp=pp, vpp=vpp)
    options = ParallelOptions(schedule if pp > 1 else "1f1b", recompute=recompute)
    if vpp > 1 and (64 // (layout.dp(GPUS) * mb)) % pp:
        return
    assert 0.0 < _bound(layout, options, strategy, mb) <= _step(layout, options, strategy, mb) * (1 + 1e-9)


def test_a_cache_shared_with_the_steps_gives_the_same_bound() -> None:
    cache = ComposeCache()
    layout, options = ParallelLayout(tp=2, pp=4), ParallelOptions()
    topology = cluster("dgx-a100", GPUS)
    config = TrainingConfig(global_batch=64, micro_batch=1, seq_len=512)
    workload = small_gpt(8, tied=False)
    first = step_time_lower_bound(workload, config, topology, "zero1", layout, options, cache=cache)
    simulate_parallel_step(workload, config, topology, "zero1", layout, options, cache=cache, trace=False)
    assert step_time_lower_bound(workload, config, topology, "zero1", layout, options, cache=cache) == first


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_the_bound_holds_under_fp8_tensor_parallel_gathers(recipe: str) -> None:
    """torchao's tensorwise FP8 gathers the sequence-parallel activations in fp8: the bound prices
    them as the step does, so it stays below the step (bf16 gathers in the bound would not)."""
    topology = cluster("hgx-h100", GPUS)
    config = TrainingConfig(global_batch=64, micro_batch=1, seq_len=512, dtype="fp8", fp8=recipe)
    layout = ParallelLayout(tp=8, pp=2)
    options = ParallelOptions(sequence_parallel=True)
    workload = small_gpt(8, tied=False)
    bound = step_time_lower_bound(workload, config, topology, "zero1", layout, options)
    step = simulate_parallel_step(workload, config, topology, "zero1", layout, options, trace=False)
    assert 0.0 < bound <= step.report.step_time_s * (1 + 1e-9)
