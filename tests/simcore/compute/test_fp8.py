"""FP8 recipes by hand: the cast traffic of each recipe per linear, which linears run in FP8, the
GEMMs at the fp8 peak plus casts (the output head in bf16), the fp8 all-gather, how --fp8 and
--dtype fp8 relate, and the device check's one line."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from simcore.compute.fp8 import (
    Fp8ComputeModel,
    cast_bytes,
    fp8_gather_bytes,
    is_fp8_linear,
    load_recipe,
    resolve_fp8,
    weight_cast_microbatches,
)
from simcore.compute.precision import check_precision, resolve_precision
from simcore.compute.roofline import ComputeModel
from simcore.errors import TrainsimError
from simcore.hardware import device_spec
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import Layer, MoEDims, Workload

S, H, FFN = 256, 512, 1024


@functools.cache
def _model(moe: bool = False) -> Workload:
    shape = TransformerShape(
        layers=2, hidden=H, heads=8, kv_heads=2, ffn=FFN, vocab=1000, seq_len=S, gated_ffn=True,
        norm="rmsnorm", bias=False, positions="rotary", dropout=False, tied_embeddings=False,
        moe=MoEDims(experts=8, top_k=2, expert_ffn=256) if moe else None,
    )  # fmt: skip
    return build_workload("tiny", shape, seq_len=None, dtype="bf16", source="test")


def _layer(name: str, moe: bool = False) -> Layer:
    return next(lay for lay in _model(moe).layers if lay.name == name)


def test_cast_traffic_per_recipe_by_hand() -> None:
    up = _layer("block0.mlp_in")  # (m, k, n) = (256, 512, 2048) per sample
    mk, kn, mn = 2 * S * H, H * 2 * FFN, 2 * S * 2 * FFN  # batch 2
    tensorwise, rowwise, delayed = (load_recipe(n) for n in ("tensorwise", "rowwise", "delayed"))
    # tensorwise: input amax 2 + cast 2+1+1 = 6; weight 2 + 3 forward, 3 backward; grad_output 6
    assert cast_bytes(up, 2, "fwd", tensorwise) == 6 * mk + 5 * kn
    assert cast_bytes(up, 2, "bwd", tensorwise) == 6 * mn + 3 * kn
    # rowwise: input 5 + 3 = 8; weight 3 forward, 4 + 3 backward; grad_output 8
    assert cast_bytes(up, 2, "fwd", rowwise) == 8 * mk + 3 * kn
    assert cast_bytes(up, 2, "bwd", rowwise) == 8 * mn + 7 * kn
    # delayed: one cast-transpose per tensor, 2 + 1 + 1
    assert cast_bytes(up, 2, "fwd", delayed) == 4 * mk + 4 * kn
    assert cast_bytes(up, 2, "bwd", delayed) == 4 * mn
    assert cast_bytes(up, 2, "recompute", tensorwise) == cast_bytes(up, 2, "fwd", tensorwise)


def test_delayed_casts_its_weights_once_per_step_spread_over_the_micro_batches() -> None:
    up = _layer("block0.mlp_in")
    mk, kn, mn = 2 * S * H, H * 2 * FFN, 2 * S * 2 * FFN  # batch 2
    delayed, tensorwise = load_recipe("delayed"), load_recipe("tensorwise")
    # Transformer Engine's weight cache (Megatron's set_is_first_microbatch): the weight's 4 B per
    # element once per step of 8 micro-batches, 0.5 B per micro-batch; inputs every micro-batch
    assert cast_bytes(up, 2, "fwd", delayed, 8) == 4 * mk + 4 * kn / 8
    assert cast_bytes(up, 2, "bwd", delayed, 8) == 4 * mn
    # torchao recasts every forward whatever the micro-batches
    assert cast_bytes(up, 2, "fwd", tensorwise, 8) == 6 * mk + 5 * kn
    assert weight_cast_microbatches("delayed", 8) == 8
    assert weight_cast_microbatches("tensorwise", 8) == weight_cast_microbatches("none", 8) == 1
    assert weight_cast_microbatches("delayed", 0) == 1
    device = device_spec("h100-sxm")
    once, every = Fp8ComputeModel(device, delayed, microbatches=8), Fp8ComputeModel(device, delayed)
    saved = once._kernel_times((up,), 2, "fwd")[0] - every._kernel_times((up,), 2, "fwd")[0]
    assert saved == pytest.approx(-4 * kn * (1 - 1 / 8) / every.memory_bandwidth_Bps, rel=1e-9)


def test_the_blocks_dense_linears_are_fp8_and_the_head_router_experts_are_not() -> None:
    assert is_fp8_linear(_layer("block0.attn_qkv")) and is_fp8_linear(_layer("block1.mlp_out"))
    assert not is_fp8_linear(_layer("lm_head"))
    assert not is_fp8_linear(_layer("block0.norm1"))
    assert not is_fp8_linear(_layer("block0.moe_router", moe=True))
    assert not is_fp8_linear(_layer("block0.experts_in", moe=True))
    # vocabulary 1000 is a multiple of 8 but the head is excluded anyway; a width not divisible by
    # 16 keeps a block linear in bf16 (torch._scaled_mm's rule)
    odd = _layer("block0.attn_out")
    assert odd.gemm is not None
    m, k, _ = odd.gemm
    from dataclasses import replace

    assert not is_fp8_linear(replace(odd, gemm=(m, k, 1000.0 + 4)))


def test_fp8_linears_run_at_the_fp8_peak_plus_their_casts_and_the_head_in_bf16() -> None:
    device = device_spec("h100-sxm")
    recipe = load_recipe("rowwise")
    model, fp8, bf16 = (
        Fp8ComputeModel(device, recipe),
        ComputeModel(device, "fp8"),
        ComputeModel(device, "bf16"),
    )
    workload = _model()
    for phase in ("fwd", "bwd"):
        times = model._kernel_times(workload.layers, 4, phase)
        for i, layer in enumerate(workload.layers):
            if is_fp8_linear(layer):
                cast = cast_bytes(layer, 4, phase, recipe) / model.memory_bandwidth_Bps
                expected = fp8._kernel_times((layer,), 4, phase)[0] + cast
            elif layer.kind == "linear":
                expected = bf16._kernel_times((layer,), 4, phase)[0]
            else:
                expected = fp8._kernel_times((layer,), 4, phase)[0]
            assert times[i] == pytest.approx(expected, rel=1e-12), (layer.name, phase)


def test_tensorwise_gathers_the_fp8_linears_in_one_byte() -> None:
    layers = _model().layers
    members = list(range(len(layers)))
    fp8_params = sum(lay.params for lay in layers if is_fp8_linear(lay))
    total = sum(lay.params for lay in layers)
    assert fp8_gather_bytes(layers, members, 2, "tensorwise") == 2 * total - fp8_params
    assert fp8_gather_bytes(layers, members, 2, "rowwise") == 2 * total
    assert fp8_gather_bytes(layers, members, 2, "none") == 2 * total


def test_dtype_fp8_is_the_delayed_recipe_and_contradictions_are_one_line() -> None:
    assert resolve_fp8("fp8", "none") == ("fp8", "delayed")
    assert resolve_fp8("bf16", "tensorwise") == ("fp8", "tensorwise")
    assert resolve_fp8("bf16", "none") == ("bf16", "none")
    with pytest.raises(TrainsimError, match="--dtype fp8 is --fp8 delayed"):
        resolve_fp8("fp8", "rowwise")
    with pytest.raises(TrainsimError, match="--dtype fp16 cannot go with it"):
        resolve_fp8("fp16", "tensorwise")
    assert TrainingConfig(dtype="fp8").fp8 == "delayed"
    with pytest.raises(TrainsimError, match="fp8 recipe 'rowwise' with dtype 'bf16'"):
        TrainingConfig(dtype="bf16", fp8="rowwise")


def test_torchao_recipes_keep_torch_s_precision_and_delayed_is_megatron_s() -> None:
    fsdp = resolve_precision("auto", "fp8", "fsdp", framework="torch-fsdp", fp8="tensorwise")
    assert fsdp.mode == "fsdp-mp" and fsdp.compute_dtype == "fp8" and fsdp.gather_dtype == "bf16"
    assert resolve_precision("auto", "fp8", "fsdp", framework="torch-fsdp", fp8="delayed").mode == "mixed"
    ddp = get_strategy("ddp")
    assert TrainingConfig(dtype="fp8", fp8="rowwise").precision_for(ddp).mode == "amp"


def test_a_device_without_fp8_gets_one_line_naming_those_with_it() -> None:
    precision = resolve_precision("auto", "fp8", "fsdp", framework="torch-fsdp", fp8="tensorwise")
    a100 = device_spec("a100-sxm-80gb")
    with pytest.raises(TrainsimError) as err:
        check_precision(precision, a100.peak_flops, a100.name)
    text = str(err.value)
    assert "a100-sxm-80gb has no fp8 tensor cores" in text and "h100-sxm" in text and "\n" not in text
    assert "a100" not in text.split("devices with them:")[1]


def test_delayed_keeps_fp8_weight_copies_and_torchao_none() -> None:
    from simcore.compute.fp8 import fp8_weight_copy_bytes
    from simcore.strategies.runner import make_context
    from tests.simcore.parallel.support import cluster

    workload = _model()
    fp8_params = sum(lay.params for lay in workload.layers if is_fp8_linear(lay))
    assert fp8_weight_copy_bytes(workload, "delayed") == 2 * fp8_params  # fp8 data + fp8 transpose
    assert fp8_weight_copy_bytes(workload, "tensorwise") == 0.0
    topology = cluster("hgx-h100", 1)
    for fp8, extra in (("delayed", 2 * fp8_params), ("tensorwise", 0)):
        config = TrainingConfig(global_batch=1, dtype="fp8", fp8=fp8)
        ctx = make_context(workload, config, topology)
        for name in ("ddp", "zero1"):
            strategy = get_strategy(name)
            held = strategy.build_plan(ctx).initial_memory["params"]
            assert held == workload.params * config.precision_for(strategy).bytes("param") + extra


def test_a_runs_compute_model_spreads_the_weight_cast_over_its_accumulation_steps() -> None:
    """The data-parallel context and the composed pipeline step hand the step's micro-batches to the
    delayed recipe's compute model (tensorwise keeps casting every micro-batch)."""
    import topologies
    from simcore.parallel import ParallelLayout, simulate_parallel_step
    from simcore.strategies.runner import make_context

    topology = topologies.load_cluster("hgx-h100", gpus=2)
    workload = _model()
    config = TrainingConfig(global_batch=16, micro_batch=2, dtype="fp8", fp8="delayed")
    timer = make_context(workload, config, topology).timer
    assert isinstance(timer, Fp8ComputeModel) and timer.microbatches == 16 // (2 * 2)
    tensorwise = replace(config, fp8="tensorwise")
    timer = make_context(workload, tensorwise, topology).timer
    assert isinstance(timer, Fp8ComputeModel) and timer.microbatches == 1

    # a pipeline of 2 stages and 8 micro-batches: more micro-batches per step spread the weight
    # cast thinner, so the per-micro-batch time of the composed step falls with the global batch
    def per_micro_batch_s(run: TrainingConfig) -> list[float]:
        return [
            simulate_parallel_step(
                workload, replace(run, global_batch=b), topology, "ddp", ParallelLayout(pp=2)
            ).report.step_time_s
            / (b // 2)
            for b in (16, 64)
        ]

    steps, plain = per_micro_batch_s(config), per_micro_batch_s(tensorwise)
    # the bubble's share falls alike for both; the delayed recipe falls further
    assert steps[1] / steps[0] < plain[1] / plain[0]


def test_fp8_gemms_plateau_at_the_measured_share_of_the_fp8_peak() -> None:
    """ml-engineering's MAMF FP8 table: H100 SXM 1402.6 of 1979 TFLOP/s (0.71), H200 0.73; a part
    without an FP8 figure (H100 PCIe) keeps its 16-bit plateau (0.78). By hand on the size curve:
    rate(F) = peak * plateau * F / (F + peak * 5 us)."""
    flops = 1e12
    for name, plateau in (("h100-sxm", 0.71), ("h200-sxm", 0.73), ("h100-pcie", 0.78)):
        device = device_spec(name)
        peak = device.flops("fp8")
        expected = peak * plateau * flops / (flops + peak * 5.0e-6)
        assert ComputeModel(device, "fp8").achieved_flops(flops) == pytest.approx(expected, rel=1e-12)
    h100 = device_spec("h100-sxm")
    bf16 = 989.5e12 * 0.80 * flops / (flops + 989.5e12 * 5.0e-6)
    assert ComputeModel(h100, "bf16").achieved_flops(flops) == pytest.approx(bf16, rel=1e-12)
