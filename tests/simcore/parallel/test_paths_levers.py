"""The run levers on both engine paths: with uneven stages, TP overlap, per-op recompute and FP8
recipes drawn at random, the event-free evaluator gives the discrete-event step (to rounding)."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.parallel import ParallelLayout, ParallelOptions
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt

REL = 1e-9
COMPARED = ("step_time_s", "peak_memory_bytes", "compute_s", "tp_comm_s", "exposed_comm_s")


@st.composite
def _split(draw: st.DrawFn, pp: int) -> tuple[int, ...] | None:
    if pp == 1 or draw(st.booleans()):
        return None
    cuts = sorted(draw(st.sets(st.integers(1, 7), min_size=pp - 1, max_size=pp - 1)))
    bounds = [0, *cuts, 8]
    return tuple(b - a for a, b in itertools.pairwise(bounds))


@settings(max_examples=12, deadline=None)
@given(
    data=st.data(),
    tp=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2, 4]),
    overlap=st.booleans(),
    recompute=st.sampled_from(["none", "selective-op"]),
    fp8=st.sampled_from(["none", "tensorwise", "delayed"]),
    strategy=st.sampled_from(["ddp", "zero1", "fsdp"]),
)
def test_fast_path_gives_the_discrete_event_step_with_the_levers(
    data: st.DataObject, tp: int, pp: int, overlap: bool, recompute: str, fp8: str, strategy: str
) -> None:
    layout = ParallelLayout(tp=tp, pp=pp, stage_layers=data.draw(_split(pp)))
    options = ParallelOptions(
        sequence_parallel=tp > 1, tp_comm_overlap=overlap and tp > 1, recompute=recompute
    )
    dp = 8 // (tp * pp)
    config = TrainingConfig(
        global_batch=dp * 2 * max(pp, 1), micro_batch=2, dtype="fp8" if fp8 != "none" else "bf16", fp8=fp8
    )
    topology = cluster("hgx-h100", 8)
    fast = compose_parallel_step(small_gpt(), config, topology, strategy, layout, options, path="fast").report
    des = compose_parallel_step(small_gpt(), config, topology, strategy, layout, options, path="des").report
    for name in COMPARED:
        a, b = getattr(fast, name), getattr(des, name)
        assert math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), (name, a, b)
