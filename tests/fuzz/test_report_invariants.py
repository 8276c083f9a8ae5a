"""Report invariants of composed layouts over random configurations (issue 23).

Whatever the layout (tensor, context, pipeline parallelism, with or without sequence parallelism and
overlap) and the data-parallel strategy: the step splits into compute and exposed communication
(``compute_s + exposed_comm_s == step_time_s``), compute is positive, the exposed communication holds
at least the tensor/context/expert collectives left on the critical path (they block the compute
stream), and collective bytes are never zero where a model-parallel axis communicates.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.strategies.base import TrainingConfig
from tests.fuzzing import FUZZ
from tests.simcore.parallel.support import cluster, small_gpt

LAYOUTS = st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]))


@FUZZ
@given(
    layout=LAYOUTS,
    strategy=st.sampled_from(["ddp", "fsdp", "zero1"]),
    sequence_parallel=st.booleans(),
    overlap=st.booleans(),
    micro_batches=st.sampled_from([1, 2, 4]),
)
def test_compute_and_exposed_communication_partition_the_step(
    layout: tuple[int, int, int], strategy: str, sequence_parallel: bool, overlap: bool, micro_batches: int
) -> None:
    tp, cp, pp = layout
    sequence_parallel = sequence_parallel or overlap  # --tp-comm-overlap needs sequence parallelism
    options = ParallelOptions(
        sequence_parallel=sequence_parallel and tp > 1, tp_comm_overlap=overlap and tp > 1
    )
    gpus = 8 if tp * cp * pp <= 8 else 16
    dp = gpus // (tp * cp * pp)
    config = TrainingConfig(global_batch=dp * micro_batches, micro_batch=1)
    report = simulate_parallel_step(
        small_gpt(4),
        config,
        cluster("dgx-a100", gpus),
        strategy,
        ParallelLayout(tp=tp, cp=cp, pp=pp),
        options,
    ).report
    model_parallel_s = report.tp_comm_s + report.cp_comm_s + report.ep_comm_s
    assert report.compute_s > 0
    assert report.compute_s + report.exposed_comm_s == pytest.approx(report.step_time_s, rel=1e-9)
    assert report.exposed_comm_s >= model_parallel_s * (1 - 1e-9)
    if tp > 1 or cp > 1:
        assert report.comm_bytes > 0
