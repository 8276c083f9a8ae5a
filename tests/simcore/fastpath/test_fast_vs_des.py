"""The fast analytical path and the discrete-event path agree wherever both can run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity, Straggler
from simcore.errors import TrainsimError
from simcore.fastpath.path import choose_path
from simcore.parallel.options import ParallelOptions
from simcore.planner.evaluate import PlanJob, evaluate_tasks
from simcore.planner.space import PlanLayout
from simcore.report import StepReport
from simcore.strategies import strategy_names
from simcore.strategies.base import TrainingConfig
from simcore.whatif.sweep import WhatIfResult, run_what_if
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload
from tests.simcore.strategies.test_strategies_support import toy_transformer
from topologies import load_cluster

CLUSTERS = ["dgx-a100", "hgx-h100", "g5.12xlarge", "g5.48xlarge", "pcie-nvl-pairs"]
MODELS = ["gpt2-small", "bert-base", "resnet50-cifar10"]
COMPARED = ("step_time_s", "step_time_p99_s", "peak_memory_bytes", "comm_s", "exposed_comm_s", "compute_s")


def _what_if(
    workload: Workload,
    cluster: str,
    gpus: int,
    strategies: list[str],
    config: TrainingConfig,
    path: str,
    heterogeneity: Heterogeneity = NO_HETEROGENEITY,
) -> WhatIfResult:
    return run_what_if(
        workload,
        [cluster],
        [gpus],
        loader=load_cluster,
        strategies=strategies,
        config=config,
        heterogeneity=heterogeneity,
        engine_path=path,
    )


def _close(des: StepReport | None, fast: StepReport | None) -> None:
    assert des is not None and fast is not None
    for name in COMPARED:
        assert getattr(fast, name) == pytest.approx(getattr(des, name), rel=0.01, abs=1e-12), name
    assert (fast.fits, fast.samples_per_s > 0) == (des.fits, True)
    assert fast.bottleneck_link == des.bottleneck_link


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from([*MODELS, "toy"]),
    cluster=st.sampled_from(CLUSTERS),
    strategy=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([2, 4, 8, 16]),
    micro_batch=st.sampled_from([1, 2, 4]),
    accumulation=st.integers(1, 3),
    checkpoint=st.booleans(),
    seq_len=st.sampled_from([128, 512]),
    slowdown=st.sampled_from([None, None, 1.1]),
)
def test_fast_path_agrees_with_the_discrete_event_path(
    model: str,
    cluster: str,
    strategy: str,
    gpus: int,
    micro_batch: int,
    accumulation: int,
    checkpoint: bool,
    seq_len: int,
    slowdown: float | None,
) -> None:
    """The what-if on both paths; ``slowdown`` None is the default per-collective contention."""
    if strategy == "hsdp" and gpus % 8:
        gpus = 16  # hsdp needs whole nodes of eight
    workload = toy_transformer() if model == "toy" else load_workload(model, seq_len=seq_len)
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        seq_len=seq_len,
        activation_checkpointing=checkpoint,
        comm_compute_slowdown=slowdown,
    )
    runs = {path: _what_if(workload, cluster, gpus, [strategy], config, path) for path in ("des", "fast")}
    assert runs["fast"].engine_paths == {(cluster, 1): "fast", (cluster, gpus): "fast"}
    assert runs["des"].engine_paths[(cluster, gpus)] == "des"
    for des, fast in zip(runs["des"].reports, runs["fast"].reports, strict=True):
        _close(des, fast)


def test_auto_takes_the_fast_path_only_where_every_rank_is_alike() -> None:
    topology = load_cluster("dgx-a100", gpus=16)
    assert choose_path("auto", topology) == "fast"
    assert choose_path("auto", topology, Heterogeneity((Straggler(3, 2.0),))) == "des"
    assert choose_path("auto", topology, Heterogeneity.from_strings([], "compute=lognormal:0.1")) == "des"
    assert choose_path("auto", topology, Heterogeneity.from_strings([], "link=lognormal:0.1")) == "fast"
    assert choose_path("des", topology) == "des"
    assert choose_path("fast", topology, Heterogeneity((Straggler(3, 2.0),))) == "fast"
    with pytest.raises(TrainsimError, match="engine path 'quick' is not known; allowed: auto, fast, des"):
        choose_path("quick", topology)


def test_stragglers_forced_onto_the_fast_path_give_the_simulated_answer() -> None:
    workload = load_workload("gpt2-small", seq_len=256)
    config = TrainingConfig(global_batch=32, micro_batch=2, seq_len=256, steps=4)
    uneven = Heterogeneity((Straggler(5, 1.5),))
    runs = [_what_if(workload, "dgx-a100", 16, ["ddp", "fsdp"], config, p, uneven) for p in ("auto", "fast")]
    assert runs[0].engine_paths[("dgx-a100", 16)] == "des"
    for des, fast in zip(runs[0].reports, runs[1].reports, strict=True):
        _close(des, fast)


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["gpt2-small", "gpt2-medium", "bert-base"]),
    cluster=st.sampled_from([*CLUSTERS, "hgx-h200"]),
    strategy=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([2, 8, 16, 64]),
    micro_batch=st.sampled_from([1, 2, 4]),
    accumulation=st.sampled_from([1, 2, 4, 5, 9]),
    checkpoint=st.booleans(),
    dtype=st.sampled_from(["bf16", "bf16", "fp32"]),
    slowdown=st.sampled_from([None, None, 1.0, 1.15]),
)
def test_the_planners_fast_path_agrees_with_the_discrete_event_path(
    model: str,
    cluster: str,
    strategy: str,
    gpus: int,
    micro_batch: int,
    accumulation: int,
    checkpoint: bool,
    dtype: str,
    slowdown: float | None,
) -> None:
    """What the planner times (closed-form collectives, long accumulation extrapolated from a
    probe, per-collective contention by default) against the simulated collectives and the
    discrete-event run of the whole step."""
    if strategy == "hsdp" and gpus % 8:
        gpus = 16
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation,
        micro_batch=micro_batch,
        seq_len=512,
        dtype=dtype,
        comm_compute_slowdown=slowdown,
    )
    workload = load_workload(model, seq_len=512)
    task = (
        gpus,
        PlanLayout(
            strategy, micro_batch, options=ParallelOptions(recompute="full" if checkpoint else "none")
        ),
    )
    outcomes = {
        path: evaluate_tasks(PlanJob(workload, cluster, load_cluster, config, engine_path=path), [task])[0]
        for path in ("des", "fast")
    }
    assert outcomes["des"].error == outcomes["fast"].error
    if outcomes["des"].error:  # refused alike (bf16 on a GPU without it, say)
        return
    assert (outcomes["des"].path, outcomes["fast"].path) == ("des", "fast")
    _close(outcomes["des"].report, outcomes["fast"].report)
