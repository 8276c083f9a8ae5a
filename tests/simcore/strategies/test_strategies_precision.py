"""Strategies under the precision modes, accumulation and contention: what each framework moves and holds."""

from __future__ import annotations

import pytest

from simcore.strategies import get_strategy
from simcore.strategies.base import CommCost, TrainingConfig
from simcore.strategies.runner import simulate_step, sync_intervals
from tests.simcore.strategies.test_strategies_support import toy_context


def _run(name: str, gpus: int, **config: object):
    cfg = TrainingConfig(**{"global_batch": 2 * gpus, "micro_batch": 2, **config})  # type: ignore[arg-type]
    ctx = toy_context(gpus, cfg)
    return simulate_step(get_strategy(name), ctx), ctx


def _bytes(result, kind: str) -> float:
    return sum(op.bytes for op in result.plan.ops if op.kind == kind)


def test_ddp_autocast_reduces_fp32_and_the_compression_hook_halves_it() -> None:
    amp, ctx = _run("ddp", 8, precision="amp")
    compressed, _ = _run("ddp", 8, precision="amp-compress")
    params = ctx.workload.params
    assert _bytes(amp, "all_reduce") == pytest.approx(params * 4)
    assert _bytes(compressed, "all_reduce") == pytest.approx(params * 2)
    assert amp.plan.initial_memory["params"] == params * 4  # fp32 parameters under autocast


def test_autocast_holds_the_weight_casts_until_backward() -> None:
    amp, ctx = _run("ddp", 2, precision="amp", allocator_overhead_bytes=0)
    mixed, _ = _run("ddp", 2, precision="mixed", allocator_overhead_bytes=0)
    assert (
        amp.run.memory.category_max["buffers"]
        >= amp.plan.initial_memory["buffers"] + ctx.workload.params * 2 * 0.99
    )
    assert amp.plan.compute_s() > mixed.plan.compute_s()  # the casts take time


def test_fsdp_mixed_precision_gathers_low_and_reduces_fp32() -> None:
    result, ctx = _run("fsdp", 8, precision="fsdp-mp")
    low, _ = _run("fsdp", 8, precision="fsdp-mp-low")
    params = ctx.workload.params
    assert _bytes(result, "reduce_scatter") == pytest.approx(params * 4)
    assert _bytes(low, "reduce_scatter") == pytest.approx(params * 2)
    gathered = _bytes(result, "all_gather")
    assert gathered == pytest.approx(_bytes(low, "all_gather")) and gathered > params * 2  # bf16, twice


def test_fsdp_without_gradient_sync_reduces_once_and_holds_the_unsharded_gradients() -> None:
    every, ctx = _run("fsdp", 4, global_batch=16, precision="mixed", allocator_overhead_bytes=0)
    once, _ = _run("fsdp", 4, global_batch=16, precision="mixed", allocator_overhead_bytes=0,
                   gradient_sync_every_micro_batch=False)  # fmt: skip
    assert ctx.accumulation == 2
    assert _bytes(once, "reduce_scatter") == pytest.approx(_bytes(every, "reduce_scatter") / 2)
    assert once.run.memory.category_max["buffers"] > every.run.memory.category_max["buffers"]


def test_zero1_and_zero2_coincide_without_accumulation_and_differ_with_it() -> None:
    z1, _ = _run("zero1", 4, precision="mixed", allocator_overhead_bytes=0)
    z2, _ = _run("zero2", 4, precision="mixed", allocator_overhead_bytes=0)
    assert z1.run.step_time_s == pytest.approx(z2.run.step_time_s)
    acc1, _ = _run("zero1", 4, global_batch=32, precision="mixed", allocator_overhead_bytes=0)
    acc2, _ = _run("zero2", 4, global_batch=32, precision="mixed", allocator_overhead_bytes=0)
    assert _bytes(acc2, "all_reduce") == pytest.approx(4 * _bytes(acc1, "all_reduce"))  # every micro-batch
    assert acc2.run.memory.peak().breakdown["grads"] < acc1.run.memory.peak().breakdown["grads"]


def test_contention_follows_the_channels_over_the_sms() -> None:
    from simcore.compute.roofline import ComputeModel
    from simcore.hardware import device_spec

    ctx = toy_context(8)
    ctx.timer = ComputeModel(device_spec("a100-sxm-80gb"), "bf16")
    nvswitch = ctx.contention(CommCost(1.0, "", "nvswitch"))
    pcie = ctx.contention(CommCost(1.0, "", "pcie"))
    assert nvswitch == pytest.approx(108 / (108 - 24)) and 1.0 < pcie < nvswitch


def test_network_collectives_take_two_channels_per_nic_whatever_the_fabric() -> None:
    """RoCE and EFA run NCCL's channels like IB: per NIC on the host, not a free pass (on an A100,
    whose GEMMs are not persistent: every kernel slows by the SMs the channels leave)."""
    from simcore.compute.roofline import ComputeModel
    from simcore.hardware import device_spec

    ctx = toy_context(8)
    ctx.timer = ComputeModel(device_spec("a100-sxm-80gb"), "bf16")
    ctx.nics_per_node = 8
    eight = {kind: ctx.contention(CommCost(1.0, "", kind)) for kind in ("ib", "roce", "efa", "ethernet")}
    assert all(f == pytest.approx(108 / (108 - 16)) for f in eight.values())
    ctx.nics_per_node = 2
    assert ctx.contention(CommCost(1.0, "", "roce")) == pytest.approx(108 / (108 - 4))
    ctx.nics_per_node = 0  # unknown NICs: the per-kind figure
    assert ctx.contention(CommCost(1.0, "", "efa")) == pytest.approx(108 / (108 - 16))


def test_make_context_counts_the_nics_of_rank_zeros_host() -> None:
    from simcore.strategies.runner import make_context
    from simcore.workload.loader import load_workload
    from topologies import load_cluster

    cfg = TrainingConfig(global_batch=16, micro_batch=1, seq_len=128)
    ctx = make_context(load_workload("gpt2-small", seq_len=128), cfg, load_cluster("h100-roce-800g", gpus=16))
    assert ctx.nics_per_node == 8


def test_jitter_per_sync_point_pays_more_where_there_are_more_sync_points() -> None:
    def p50(name: str, scope: str) -> float:
        cfg = TrainingConfig(
            global_batch=16, micro_batch=2, steps=40, compute_jitter_sigma=0.2, jitter_scope=scope
        )
        times = simulate_step(get_strategy(name), toy_context(8, cfg), seed=1).step_times_s
        return sorted(times)[len(times) // 2]

    fsdp_ratio = p50("fsdp", "sync") / p50("fsdp", "step")
    assert fsdp_ratio > 1.0
    ddp, _ = _run("ddp", 8)
    fsdp, _ = _run("fsdp", 8)
    assert max(sync_intervals(fsdp.plan)) > max(sync_intervals(ddp.plan))


def test_fsdp_collectives_block_a_cpu_rank_and_overlap_on_a_gpu() -> None:
    """FSDP2 issues its collectives without ``async_op``: on a device without streams each one
    blocks the training thread, so no compute runs while a collective is in flight."""
    from types import SimpleNamespace

    from tests.simcore.strategies.test_strategies_support import RateTimer

    class CpuTimer(RateTimer):
        device = SimpleNamespace(kind="cpu")

    def overlap_s(timer: RateTimer) -> float:
        cfg = TrainingConfig(global_batch=8, micro_batch=2, precision="mixed")
        ctx = toy_context(4, cfg)
        ctx = type(ctx)(ctx.workload, cfg, 4, timer, ctx.collective, ctx.world, ctx.node,
                        ctx.cross_node, ctx.device_memory_bytes)  # fmt: skip
        spans = simulate_step(get_strategy("fsdp"), ctx).run.spans
        comm = [(s.start_s, s.end_s) for s in spans if s.stream == "comm" and s.end_s > s.start_s]
        compute = [(s.start_s, s.end_s) for s in spans if s.stream == "compute"]
        return sum(max(0.0, min(b, d) - max(a, c)) for a, b in comm for c, d in compute)

    assert overlap_s(CpuTimer()) == pytest.approx(0.0, abs=1e-12)
    assert overlap_s(RateTimer()) > 0.0


def test_an_explicitly_resharded_root_is_gathered_again_for_backward() -> None:
    kept, _ = _run("fsdp", 4)
    resharded, _ = _run("fsdp", 4, reshard_root_after_forward=True)

    def root_gathers(result) -> int:
        return sum(1 for op in result.plan.ops if op.kind == "all_gather" and "unit 0 " in op.name)

    assert (root_gathers(kept), root_gathers(resharded)) == (1, 2)
