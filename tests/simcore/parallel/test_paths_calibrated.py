"""The composed (3-D) step with a calibration profile: the event-free and discrete-event paths price
every collective of every group by the same per-protocol fits and agree on the step, and the
profile really moves both (so agreement is not two paths ignoring it alike)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simcore.parallel import ParallelLayout, ParallelOptions
from simcore.parallel.report import ParallelStepReport
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from tests.simcore.fastpath.test_fast_vs_des import collectives_profile
from tests.simcore.parallel.support import cluster, small_gpt

COMPARED = ("step_time_s", "peak_memory_bytes", "compute_s", "exposed_comm_s", "comm_s", "tp_comm_s")


def _close(fast: ParallelStepReport, des: ParallelStepReport) -> None:
    for name in COMPARED:
        a, b = getattr(fast, name), getattr(des, name)
        assert math.isclose(a, b, rel_tol=0.01, abs_tol=1e-12), (name, a, b)
    assert fast.fits == des.fits


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    gpus=st.sampled_from([8, 16]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    strategy=st.sampled_from(["ddp", "zero1", "zero3", "fsdp"]),
    schedule=st.sampled_from(["1f1b", "zb-h1"]),
    sequence_parallel=st.booleans(),
)
def test_calibrated_3d_steps_agree_on_both_paths(
    gpus: int, tp: int, pp: int, strategy: str, schedule: str, sequence_parallel: bool
) -> None:
    assume(tp * pp > 1 and gpus % (tp * pp) == 0)
    workload, topology = small_gpt(), cluster("dgx-a100", gpus)
    profile = collectives_profile("dgx-a100", gpus)
    layout = ParallelLayout(tp=tp, pp=pp)
    options = ParallelOptions(schedule=schedule, sequence_parallel=sequence_parallel)
    dp = gpus // (tp * pp)
    config = TrainingConfig(global_batch=dp * 2 * max(pp, 2), micro_batch=2)
    reports = {
        path: compose_parallel_step(
            workload, config, topology, strategy, layout, options, calibration=profile, path=path
        ).report
        for path in ("fast", "des")
    }
    _close(reports["fast"], reports["des"])
    plain = compose_parallel_step(workload, config, topology, strategy, layout, options, path="fast").report
    assert plain.comm_s != reports["fast"].comm_s  # the profile's fits priced the collectives
