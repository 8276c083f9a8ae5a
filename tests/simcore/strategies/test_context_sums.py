"""What a context keeps once per run of layers (counts, span sums, buckets) equals what each plan
used to derive afresh: the same numbers, bit for bit, whatever order or extras ask for them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simcore.compute.roofline import ComputeModel, param_tensor_count
from simcore.hardware import device_spec
from simcore.strategies.base import StepContext, TrainingConfig
from simcore.strategies.ddp import assign_buckets
from simcore.workload.loader import load_workload
from simcore.workload.types import Layer
from tests.simcore.strategies.test_strategies_support import toy_context


def _gpt2_context(micro_batch: int = 1) -> tuple[StepContext, ComputeModel]:
    ctx = toy_context(8, TrainingConfig(global_batch=8 * micro_batch, micro_batch=micro_batch))
    ctx.workload = load_workload("gpt2-small", seq_len=256)
    timer = ComputeModel(device_spec("a100-sxm-80gb"), "bf16")
    ctx.timer = timer
    return ctx, timer


def test_layer_counts_are_the_sums_over_the_layers_and_param_tensor_count() -> None:
    ctx, _ = _gpt2_context()
    layers = ctx.workload.layers
    run = tuple(range(3, 17))  # a run that starts and ends mid-block
    params, tensors, with_params = ctx.layer_counts(run)
    assert params == sum(layers[i].params for i in run)
    assert tensors == param_tensor_count(replace(ctx.workload, layers=tuple(layers[i] for i in run), ties=()))
    assert with_params == sum(1 for i in run if layers[i].params)
    model = ctx.model_counts()
    assert model == (ctx.workload.params, param_tensor_count(ctx.workload), model[2])
    assert model[2] == sum(1 for layer in layers if layer.params) and 0 < model[2] < len(layers)


def test_a_layer_without_parameters_counts_no_tensor() -> None:
    ctx = toy_context(8)
    ctx.workload = replace(
        ctx.workload,
        layers=(*ctx.workload.layers, Layer("norm", "layernorm", -1, 0, 1.0, 1.0, 1.0, 1.0, 1.0)),
    )
    last = len(ctx.workload.layers) - 1
    assert ctx.layer_counts((last,)) == (0, 0, 0)
    # the head beside it: a linear's weight and bias (efficiency.yaml, param_tensors), one layer
    assert ctx.layer_counts((last - 1, last))[1:] == (2, 1)


@pytest.mark.parametrize("micro_batch", [1, 64])  # dispatch-bound, kernel-bound
def test_span_time_is_the_correctly_rounded_sum_with_the_extras_added_after(micro_batch: int) -> None:
    ctx, timer = _gpt2_context(micro_batch)
    kernel, host = timer.layer_parts_s(ctx.workload, micro_batch, "bwd")
    extra_s, extra_ops = 3e-6, 7.0
    for run in (tuple(range(5, 29)), (40, 2, 17)):  # a run of layers, and scattered ones
        kernel_s = math.fsum(float(kernel[i]) for i in run)
        host_s = math.fsum(float(host[i]) for i in run)
        assert (kernel_s > host_s) == (micro_batch > 1)  # each bound is the one read
        want = timer.combine(kernel_s + extra_s, host_s + extra_ops * ctx.host_op_s("bwd"))
        assert ctx.span_time("bwd", run, kernel_extra_s=extra_s, host_extra_ops=extra_ops) == want
        # the sums are shared with a span of the same layers without extras
        assert ctx.span_time("bwd", run) == timer.combine(kernel_s, host_s)


def test_buckets_are_assigned_once_and_each_caller_gets_its_own_list() -> None:
    ctx, _ = _gpt2_context()
    first = assign_buckets(ctx, 2)
    first[0] = -1  # a caller's edit must not reach the next plan
    again = assign_buckets(ctx, 2)
    assert again[0] != -1 and again[-1] == 0  # bucket 0 holds the last layers
    assert max(again) >= 1 and assign_buckets(ctx, 2, 1.0, 1.0) != again  # other caps, other buckets
