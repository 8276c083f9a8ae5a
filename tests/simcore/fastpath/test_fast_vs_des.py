"""The fast analytical path and the discrete-event path agree wherever both can run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.calibration.profile import (
    SCOPES,
    CalibrationProfile,
    ClusterDescription,
    CollectiveFit,
    ProtocolFit,
)
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
    calibration: CalibrationProfile | None = None,
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
        calibration=calibration,
    )


def collectives_profile(cluster: str, gpus: int) -> CalibrationProfile:
    """A profile of ``cluster``'s collectives (at ``gpus`` GPUs) with LL and Simple lines for every data-parallel shape
    (2 to 64 ranks, both scopes), each line unlike the overall one, and nothing else measured."""
    topology = load_cluster(cluster, gpus=gpus)
    per_node = len(topology.ranks_on_host(topology.host_of_rank(0)))
    lines = {"LL": ProtocolFit(8e-6, 40e9), "Simple": ProtocolFit(35e-6, 180e9)}
    fits = {
        (op, ranks, scope): CollectiveFit(op, ranks, scope, 25e-6, 120e9, protocols=lines)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
        for ranks in (2, 4, 8, 16, 32, 64)
        for scope in SCOPES
    }
    return CalibrationProfile(
        ClusterDescription("nccl", "gpu", "", gpus, per_node, len(topology.hosts)), fits
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


@settings(max_examples=16, deadline=None)
@given(
    model=st.sampled_from(["gpt2-small", "bert-base", "toy"]),
    cluster=st.sampled_from(["dgx-a100", "g5.12xlarge", "pcie-nvl-pairs"]),
    strategy=st.sampled_from(strategy_names()),
    gpus=st.sampled_from([2, 4, 8, 16]),
    micro_batch=st.sampled_from([1, 2]),
    accumulation=st.integers(1, 2),
    calibrated=st.booleans(),
    planner=st.booleans(),
)
def test_whole_steps_agree_with_and_without_a_calibration_profile(
    model: str,
    cluster: str,
    strategy: str,
    gpus: int,
    micro_batch: int,
    accumulation: int,
    calibrated: bool,
    planner: bool,
) -> None:
    """Both paths price through the one cost model, so a profile's fits move them alike (in the
    what-if, and in the planner, which keeps one collective model per loaded cluster)."""
    if strategy == "hsdp" and gpus % 8:
        gpus = 16
    workload = toy_transformer() if model == "toy" else load_workload(model, seq_len=128)
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation, micro_batch=micro_batch, seq_len=128
    )
    profile = collectives_profile(cluster, gpus) if calibrated else None
    if planner:
        task = (gpus, PlanLayout(strategy, micro_batch))
        # the key names the profile in the planner's per-process caches (a job's id may be reused)
        key = "calibrated" if calibrated else "modelled"
        jobs = {p: PlanJob(workload, cluster, load_cluster, config, profile, p, key) for p in ("des", "fast")}
        outcomes = {p: evaluate_tasks(job, [task])[0] for p, job in jobs.items()}
        assert (outcomes["des"].path, outcomes["fast"].path) == ("des", "fast")
        reports = [(outcomes["des"].report, outcomes["fast"].report)]
    else:
        runs = {
            p: _what_if(workload, cluster, gpus, [strategy], config, p, calibration=profile)
            for p in ("des", "fast")
        }
        assert runs["fast"].engine_paths[(cluster, gpus)] == "fast"
        reports = list(zip(runs["des"].reports, runs["fast"].reports, strict=True))
    for des, fast in reports:
        _close(des, fast)
        assert des is not None and fast is not None
        assert fast.comm_s == pytest.approx(des.comm_s, rel=1e-9)  # exact, not merely within 1 %


def test_a_profile_moves_both_paths_where_it_has_fits() -> None:
    """The comparison above is not vacuous: the profile's fits change the step on both paths."""
    workload = load_workload("gpt2-small", seq_len=128)
    config = TrainingConfig(global_batch=8, micro_batch=1, seq_len=128)
    profile = collectives_profile("dgx-a100", 8)
    for path in ("des", "fast"):
        plain = _what_if(workload, "dgx-a100", 8, ["fsdp"], config, path).reports[-1]
        measured = _what_if(workload, "dgx-a100", 8, ["fsdp"], config, path, calibration=profile).reports[-1]
        assert measured.comm_s != pytest.approx(plain.comm_s, rel=0.01)
        assert measured.bottleneck_link == "calibrated (intra_node)"
