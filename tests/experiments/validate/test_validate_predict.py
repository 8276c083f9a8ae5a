"""experiments.validate.grid and validate_predict: the grid's shape, measured step times from records,
and predictions from a synthetic calibration profile (no torch, no real run)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.validate.grid import (
    GBIT,
    MBIT,
    MODEL_SIZES,
    STRATEGIES,
    RunSpec,
    full_grid,
    quick_grid,
    train_argv,
)
from experiments.validate.predict import (
    MeasuredRun,
    compute_slowdown,
    measured_step,
    predict,
    workload_from_description,
)
from simcore.calibration.profile_json import profile_from_json, profile_to_json
from simcore.errors import TrainsimError
from simcore.workload.types import Layer


def _profile():
    fits = [{"op": op, "ranks": n, "scope": "intra_node", "alpha_s": 1e-4, "busbw_Bps": 1e9}
            for op in ("all_reduce", "all_gather", "reduce_scatter", "send_recv") for n in (2, 3, 4)]  # fmt: skip
    return profile_from_json({
        "format": "trainsim-profile", "version": 1,
        "cluster": {"backend": "gloo", "device_kind": "cpu", "device_name": "cpu", "world_size": 2,
                    "ranks_per_node": 2, "nodes": 1},
        "collectives": fits,
        "compute": {"dtypes": {"fp32": {"peak_flops": 5e10, "half_flops": 5e5}}, "memory_bandwidth_Bps": 5e9,
                    "comm_compute_slowdown": 1.0},
    })  # fmt: skip


def _description(width: int = 64, blocks: int = 2) -> dict:
    layers = [{"name": "embed", "kind": "embedding", "block": -1, "params": 256 * width, "fwd_flops": 0.0,
               "bwd_flops": 0.0, "activation_bytes": 0.0, "output_bytes": 128.0 * width,
               "memory_bytes": 128.0 * width + 4 * 256 * width}]  # fmt: skip
    for block in range(blocks):
        params = 12 * width * width
        layers.append({"name": f"blocks.{block}.mlp", "kind": "linear", "block": block, "params": params,
                       "fwd_flops": 2.0 * 32 * params, "bwd_flops": 4.0 * 32 * params,
                       "activation_bytes": 128.0 * width, "output_bytes": 128.0 * width,
                       "memory_bytes": 256.0 * width + 4 * params})  # fmt: skip
    return {"params": sum(r["params"] for r in layers), "blocks": blocks, "layers": layers}


def _run(spec: RunSpec, background: float = 0.0) -> MeasuredRun:
    return MeasuredRun(spec, 0.1, 5, _description(), {}, background)


def test_full_grid_covers_the_issue():
    grid = full_grid(testbed=True)
    assert len({s.key for s in grid}) == len(grid)
    assert {s.strategy for s in grid} == set(STRATEGIES)
    assert {s.world for s in grid} == {2, 3, 4}
    assert len({s.size for s in grid}) >= 2
    assert {s.bandwidth_Bps for s in grid if s.network == "testbed"} == {GBIT, 100 * MBIT}
    assert any(s.slow_rank >= 0 for s in grid)
    assert all(s.network == "loopback" for s in full_grid(testbed=False))


def test_quick_grid_is_small_and_real():
    grid = quick_grid()
    assert all(s.world == 2 and s.network == "loopback" for s in grid)
    assert any(s.is_ps for s in grid) and any(not s.is_ps for s in grid)


def test_train_argv_is_accepted_by_calibrate_train():
    pytest.importorskip("torch")
    from calibrate.train.cli import config_from_args

    spec = RunSpec("ps-ssp", "transformer-l", 3, slow_rank=2, slow_factor=2.0)
    config = config_from_args(train_argv(spec, "x.jsonl"))
    size = MODEL_SIZES["transformer-l"]
    assert (config.strategy, config.width, config.batch, config.threads) == (
        "ps-ssp",
        size.width,
        size.batch,
        1,
    )
    assert (config.slow_rank, config.slow_factor) == (2, 2.0)


@pytest.mark.parametrize(
    "kwargs",
    [{"strategy": "horovod"}, {"size": "huge"}, {"network": "testbed"}, {"world": 1},
     {"strategy": "ps-sync", "slow_rank": 0}, {"steps": 2, "warmup": 3}],
)  # fmt: skip
def test_bad_run_specs_are_refused(kwargs):
    base = {"strategy": "ddp", "size": "cnn-s", "world": 2}
    with pytest.raises(TrainsimError):
        RunSpec(**{**base, **kwargs})


def _step(rank: int, step: int, seconds: float, warmup: bool = False, role: str = "worker") -> dict:
    return {
        "kind": "step",
        "rank": rank,
        "step": step,
        "step_time_s": seconds,
        "warmup": warmup,
        "role": role,
    }


def test_synchronous_step_is_the_slowest_rank_median_over_steps():
    records = [_step(0, 0, 9.0, warmup=True), _step(0, 1, 1.0), _step(1, 1, 2.0), _step(0, 2, 3.0),
               _step(1, 2, 1.0), _step(0, 3, 5.0), _step(1, 3, 4.0)]  # fmt: skip
    step, timed, _ = measured_step(records, RunSpec("ddp", "cnn-s", 2))
    assert (step, timed) == (3.0, 3)


def test_asynchronous_step_is_one_gradient_per_worker_at_the_combined_rate():
    records = [
        _step(1, 0, 1.0),
        _step(1, 1, 1.0),
        _step(2, 0, 2.0),
        _step(2, 1, 2.0),
        _step(0, 0, 50.0, role="server"),
    ]
    step, _, _ = measured_step(records, RunSpec("ps-async", "cnn-s", 3))
    assert step == pytest.approx(2 / (1 / 1.0 + 1 / 2.0))


def test_no_timed_steps_is_an_error():
    with pytest.raises(TrainsimError, match="no step records"):
        measured_step([_step(0, 0, 1.0, warmup=True)], RunSpec("ddp", "cnn-s", 2))


def test_workload_from_description_takes_weights_out_of_per_sample_bytes():
    workload = workload_from_description(_description(), "t", 32)
    assert workload.params == _description()["params"]
    assert workload.layers[1].memory_bytes == 256.0 * 64


@given(st.integers(1, 64), st.integers(1, 64))
def test_compute_slowdown_is_one_until_cores_run_out_then_proportional(busy, cores):
    slowdown = compute_slowdown(busy, cores)
    assert slowdown >= 1.0
    assert math.isclose(slowdown, max(1.0, busy / cores))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_background_load_and_a_slow_rank_never_make_a_step_faster(strategy):
    world = 3
    base = predict(_run(RunSpec(strategy, "transformer-s", world)), _profile(), 2)
    loaded = predict(_run(RunSpec(strategy, "transformer-s", world), background=3.0), _profile(), 2)
    slowed = predict(
        _run(RunSpec(strategy, "transformer-s", world, slow_rank=2, slow_factor=3.0)), _profile(), 2
    )
    assert base.step_time_s is not None and base.step_time_s > 0
    assert loaded.step_time_s is not None and loaded.step_time_s > base.step_time_s
    assert slowed.step_time_s is not None and slowed.step_time_s >= base.step_time_s


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "ps-sync"])
def test_a_slower_shaped_link_gives_a_slower_step(strategy):
    fast = predict(_run(RunSpec(strategy, "transformer-l", 3, "testbed", GBIT)), _profile(), 2)
    slow = predict(_run(RunSpec(strategy, "transformer-l", 3, "testbed", 100 * MBIT)), _profile(), 2)
    assert fast.step_time_s is not None and slow.step_time_s is not None
    assert slow.step_time_s > fast.step_time_s


def test_prediction_is_deterministic():
    spec = RunSpec("ps-async", "transformer-s", 4, slow_rank=1, slow_factor=2.0)
    assert predict(_run(spec, 1.5), _profile(), 2) == predict(_run(spec, 1.5), _profile(), 2)


def test_full_grid_uses_models_where_compute_matters() -> None:
    grid = full_grid(testbed=True)
    assert {spec.size for spec in grid} == {"transformer-w256", "transformer-w384", "cnn-w64"}
    assert all(spec.size == "transformer-w256" for spec in grid if spec.network == "testbed")


def test_layer_timer_exposes_bandwidth_and_optimizer_dispatch_of_its_model() -> None:
    from experiments.validate.predict import LayerCorrectedTimer

    data = profile_to_json(_profile())
    data["compute"]["op_overhead_s"] = {"fwd": 1e-5, "bwd": 2e-5}
    timer = LayerCorrectedTimer(profile_from_json(data), {})
    assert timer.memory_bandwidth_Bps == 5e9
    from simcore.compute.optimizer import optimizer_step_cost

    cost = optimizer_step_cost("sgd-momentum", "single", 1000, 10, 4)  # the CPU's for-loop
    assert timer.optimizer_step_time_s(cost) == pytest.approx(1000 * 32 / 5e9 + 10 * 3 * 1e-5)
    assert timer.host_op_s("bwd") == 2e-5


def test_op_overhead_and_copies_make_the_prediction_slower() -> None:
    data = profile_to_json(_profile())
    data["compute"]["op_overhead_s"] = {"fwd": 1e-5, "bwd": 2e-5}
    run = _run(RunSpec("ddp", "transformer-s", 2))
    without = predict(run, _profile(), 2).step_time_s
    with_overhead = predict(run, profile_from_json(data), 2).step_time_s
    assert without is not None and with_overhead is not None and with_overhead > without


def test_asynchronous_workers_share_the_cores_less_than_a_synchronous_round() -> None:
    """Three workers on two cores: a synchronous round time-slices all three for its whole compute
    (1.5x); asynchronous workers are slowed only by those busy beside them, so their compute per
    gradient lies between alone and all three at once."""
    from experiments.validate.predict import _busy_fractions, _simulate_ps

    spec = RunSpec("ps-async", "transformer-s", 4)
    prediction = predict(_run(spec), _profile(), 2)
    sync = predict(_run(RunSpec("ps-sync", "transformer-s", 4)), _profile(), 2)
    alone = predict(_run(spec), _profile(), 4)  # as many cores as threads: nothing shared
    assert prediction.compute_s is not None and sync.compute_s is not None and alone.compute_s is not None
    assert alone.compute_s < prediction.compute_s < 1.5 * alone.compute_s
    assert sync.compute_s == pytest.approx(1.5 * alone.compute_s)
    workload = workload_from_description(_description(), spec.size, 0)
    from experiments.validate.predict import measured_topology

    outcome = _simulate_ps(spec, workload, measured_topology(spec, _profile()), _profile(), [1.0, 1.0, 1.0])
    fractions = _busy_fractions(outcome, spec)
    assert len(fractions) == spec.workers + 1 and all(0.0 < f <= 1.0 for f in fractions)


def test_a_shaped_link_carries_tcp_payload_at_its_rate_less_the_headers() -> None:
    from experiments.validate.predict import measured_topology

    graph = measured_topology(RunSpec("ddp", "transformer-s", 2, "testbed", GBIT), _profile()).graph
    rates = {d["bandwidth_Bps"] for _, _, d in graph.edges(data=True)}
    assert GBIT * 1448 / 1514 in rates and GBIT not in rates


def _with_after_compute(alpha_s: float) -> dict:
    data = profile_to_json(_profile())
    data["collectives_after_compute"] = [
        {"op": op, "ranks": 2, "scope": "intra_node", "alpha_s": alpha_s, "busbw_Bps": 1e9}
        for op in ("all_gather", "reduce_scatter")
    ]
    return data


def test_fsdp_on_loopback_prices_its_blocking_collectives_as_measured_after_compute() -> None:
    """FSDP2's all-gathers and reduce-scatters block a CPU rank between units' compute: with
    after-compute fits in the profile, each costs their alpha (here 5 ms more than back to back)
    and nothing else changes: DDP, shaped links and a profile without them stay as they were."""
    from experiments.validate.predict import blocking_profile

    slower = profile_from_json(_with_after_compute(5e-3))
    assert blocking_profile(_profile()) == _profile()
    assert blocking_profile(slower).collective_alpha_beta("all_gather", 2, "intra_node") == (5e-3, 1e9)
    assert blocking_profile(slower).collective_alpha_beta("all_reduce", 2, "intra_node") == (1e-4, 1e9)
    fsdp = _run(RunSpec("fsdp", "transformer-s", 2))
    base, after = predict(fsdp, _profile(), 2).step_time_s, predict(fsdp, slower, 2).step_time_s
    assert base is not None and after is not None
    # 3 units (the root and two blocks): 3 + 3 all-gathers and 3 reduce-scatters, 4.9 ms more each
    assert after - base == pytest.approx(9 * 4.9e-3, rel=0.05)
    for spec in (RunSpec("ddp", "transformer-s", 2), RunSpec("fsdp", "transformer-s", 2, "testbed", GBIT)):
        assert predict(_run(spec), slower, 2).step_time_s == predict(_run(spec), _profile(), 2).step_time_s


def _link(alpha_s: float, busbw_Bps: float) -> dict:
    data = profile_to_json(_profile())
    data["collectives"] = [
        {"op": op, "ranks": 2, "scope": "inter_node", "alpha_s": alpha_s, "busbw_Bps": busbw_Bps}
        for op in ("all_gather", "reduce_scatter", "all_reduce")
    ]
    return data


def test_a_testbed_run_prices_its_collectives_as_measured_on_its_link() -> None:
    """With the collectives swept on the run's emulated link, FSDP's all-gathers and reduce-scatters
    (measured as gloo runs them: no all-reduce stand-in) take those fits; a slower link sweep gives a
    slower step, loopback runs ignore it."""
    spec = RunSpec("fsdp", "transformer-s", 2, "testbed", MBIT * 100)
    fast, slow = profile_from_json(_link(1e-4, 5e7)), profile_from_json(_link(1e-4, 5e6))
    times = [predict(_run(spec), _profile(), 2, link=link).step_time_s for link in (None, fast, slow)]
    assert all(t is not None for t in times)
    assert times[1] < times[2]  # type: ignore[operator]
    loopback = _run(RunSpec("fsdp", "transformer-s", 2))
    assert (
        predict(loopback, _profile(), 2, link=slow).step_time_s
        == predict(loopback, _profile(), 2).step_time_s
    )


def test_a_layer_takes_the_ratio_of_the_benchmark_nearest_in_intensity_and_size():
    """Hand count, features (ln FLOPs/byte, ln FLOPs): target 5e8 FLOPs over 4e6 B (125 a byte);
    A (1e8, 1e7: 10 a byte) is 2.53^2 + 1.61^2 = 8.97 away, B (1e9, 1e7) 0.22^2 + 0.69^2 = 0.53,
    C (1e7, 1e5) 0.22^2 + 3.91^2 = 15.3."""
    from experiments.validate.predict import BenchPoint, nearest_ratio

    points = [BenchPoint(1e8, 1e7, 2.0), BenchPoint(1e9, 1e7, 3.0), BenchPoint(1e7, 1e5, 5.0)]
    assert nearest_ratio(points, 5e8, 4e6) == 3.0
    assert nearest_ratio(points, 1e8, 8e6) == 2.0  # 12.5 a byte: the stem-like point
    assert nearest_ratio(points, 1e7, 1.2e5) == 5.0
    # the CNN's 64-channel 16x16 convolution (6.04e8 FLOPs, 4.34e6 B: 139 a byte) between the
    # 3-channel stem (1.13e8, 8.8e6: 12.8) and the 32x32 one (2.42e9, 1.69e7: 143): intensity
    # 5.69 + size 2.81 = 8.5 from the stem, 0.0008 + 1.93 from the 32x32 one; in log FLOPs and log
    # bytes alone the stem would be nearer (2.81 + 0.50 against 1.93 + 1.83)
    cnn = [BenchPoint(1.13e8, 8.8e6, 4.0), BenchPoint(2.42e9, 1.69e7, 0.9)]
    assert nearest_ratio(cnn, 6.04e8, 4.34e6) == 0.9


def test_step_timed_benchmark_rows_replace_a_kinds_retained_graph_rows():
    """Same FLOPs and bytes (same modelled time m): retained 1 ms, step rows 2 ms and 4 ms at two
    shapes. The kind's median is over the step rows only, one point per shape; linear keeps its
    retained rows."""
    from experiments.validate.predict import layer_corrections

    def row(kind, shape, ms, timing=None):
        base = {"kind": "layer", "layer": kind, "layer_kind": kind, "dtype": "fp32", "phase": "fwd",
                "flops": 1e8, "bytes": 1e6, "shape": shape, "time_us_p50": ms * 1e3}  # fmt: skip
        return {**base, "timing": timing} if timing else base

    rows = [row("conv", "a", 1.0), row("conv", "a", 2.0, "step"), row("conv", "b", 4.0, "step"),
            row("linear", "a", 1.0)]  # fmt: skip
    found = layer_corrections([(rows, _profile())])
    conv = found.points[("conv", "fwd")]
    assert len(conv) == 2 and conv[1].ratio / conv[0].ratio == pytest.approx(2.0)
    assert found.medians[("conv", "fwd")] == pytest.approx(1.5 * conv[0].ratio)  # (2 + 4) / 2 over 2
    (linear,) = found.points[("linear", "fwd")]  # no step rows of its own: its retained row counts
    assert found.medians[("linear", "fwd")] == linear.ratio


def _layer(kind: str, params: int, fwd_flops: float, memory_bytes: float) -> Layer:
    return Layer("x", kind, 0, params, fwd_flops, 2 * fwd_flops, 0.0, 0.0, memory_bytes)


def test_relu_and_maxpool_take_their_own_benchmark_else_the_activation_one():
    from experiments.validate.predict import BenchPoint, LayerCorrectedTimer, LayerCorrections

    relu = _layer("relu", 0, 1e3, 8e3)
    timer = LayerCorrectedTimer(_profile(), {("activation", "fwd"): 2.0})
    assert (
        timer._factor(relu, 4, "fwd") == 2.0
        and timer._factor(_layer("maxpool", 0, 1e3, 5e3), 4, "fwd") == 2.0
    )
    assert (
        LayerCorrectedTimer(_profile(), {("relu", "fwd"): 3.0, ("activation", "fwd"): 2.0})._factor(
            relu, 4, "fwd"
        )
        == 3.0
    )
    own = LayerCorrections({("relu", "fwd"): 5.0}, {("relu", "fwd"): (BenchPoint(1.0, 1.0, 5.0),)})
    assert LayerCorrectedTimer(_profile(), own)._factor(relu, 4, "recompute") == 5.0  # recompute is a forward


def test_a_layers_weights_count_once_per_pass_when_matching_a_benchmark_shape():
    """batch 32, 1e6 weights (4 MB) and 6e6 B of activations per pass: 1e9 FLOPs over 1e7 B, the
    100-a-byte point; weights counted per sample would make it 1.34e8 B, nearer the 10-a-byte one."""
    from experiments.validate.predict import BenchPoint, LayerCorrectedTimer, LayerCorrections

    points = (BenchPoint(1e9, 1e7, 1.5), BenchPoint(1e9, 1e8, 4.0))
    timer = LayerCorrectedTimer(_profile(), LayerCorrections({}, {("conv", "fwd"): points}))
    conv = _layer("conv2d", 1_000_000, 1e9 / 32, 6e6 / 32)
    assert timer._factor(conv, 32, "fwd") == 1.5
    assert timer.layer_time_s(conv, 32, "fwd") == pytest.approx(
        1.5 * timer.base.layer_time_s(conv, 32, "fwd")
    )
