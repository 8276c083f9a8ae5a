"""Short-lived memory: tied-parameter gradient partials, optimizer-step scratch, saved-tensor sharing."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.compute.memory import optimizer_step_temp_bytes, resolve_optimizer_impl
from simcore.errors import TrainsimError
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import simulate_step
from simcore.workload.loader import load_workload
from simcore.workload.models.cnn import NetBuilder
from simcore.workload.types import Layer, ParameterTie, Workload
from tests.simcore.strategies.test_strategies_support import toy_context


def _tied_workload(tied_params: int) -> Workload:
    """Embedding (owner), two linear layers, a head that reuses the embedding matrix."""

    def layer(name: str, params: int) -> Layer:
        return Layer(name, "linear", -1, params, 1e9, 2e9, 1e6, 1e6, 2e6)

    layers = (layer("embed", tied_params), layer("a", 10**6), layer("b", 10**6), layer("head", 0))
    return Workload("tied", layers, (), "bf16", 0, "test", ties=(ParameterTie(tied_params, (0, 3)),))


def _run(workload: Workload, strategy: str = "ddp", gpus: int = 2, **config: object):
    config.setdefault("precision", "mixed")
    cfg = TrainingConfig(global_batch=2 * gpus, micro_batch=2, optimizer_impl="fused", **config)  # type: ignore[arg-type]
    return simulate_step(get_strategy(strategy), toy_context(gpus, cfg, workload=workload)).run


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "zero2"])
def test_tied_gradient_partials_coexist_with_their_sum(strategy: str) -> None:
    """Two uses: at the owner's backward both partials (temp) and their sum (the gradient) exist."""
    tied = 5 * 10**6
    run = _run(_tied_workload(tied), strategy)
    partial = tied * 2  # bf16 gradients
    assert run.memory.category_max["temp"] == pytest.approx(2 * partial)
    assert run.memory.current["temp"] == pytest.approx(0.0, abs=1e-6)  # all released by the end
    untied = _run(dataclasses.replace(_tied_workload(tied), ties=()), strategy)
    assert run.memory.peak().peak_bytes >= untied.memory.peak().peak_bytes + partial * (1 - 1e-12)


def test_a_tie_needs_two_valid_layers() -> None:
    with pytest.raises(TrainsimError, match="parameter tie"):
        dataclasses.replace(_tied_workload(10), ties=(ParameterTie(10, (0, 9)),))


def test_tied_transformer_presets_declare_their_tie() -> None:
    gpt2 = load_workload("gpt2-small", seq_len=128)
    (tie,) = gpt2.ties
    assert tie.params == 50257 * 768 and [gpt2.layers[i].name for i in tie.layers] == ["embed", "lm_head"]
    assert load_workload("llama2-7b", seq_len=128).ties == ()  # untied output projection


def test_optimizer_scratch_by_implementation() -> None:
    # single-tensor AdamW: sqrt() and the quotient of the largest tensor; foreach: one copy of all
    assert optimizer_step_temp_bytes("adamw", "single-tensor", 1000, 300, 4) == 2 * 300 * 4
    assert optimizer_step_temp_bytes("adamw", "foreach", 1000, 300, 4) == 1000 * 4
    assert optimizer_step_temp_bytes("adamw", "fused", 1000, 300, 4) == 0
    assert optimizer_step_temp_bytes("sgd-momentum", "foreach", 1000, 300, 4) == 0
    assert resolve_optimizer_impl("auto", "cpu") == "single"
    assert resolve_optimizer_impl("auto", "gpu", "deepspeed") == "fused"
    assert resolve_optimizer_impl("single-tensor", "gpu") == "single"
    assert resolve_optimizer_impl("auto", "gpu") == "foreach"
    with pytest.raises(TrainsimError, match="optimizer_impl"):
        TrainingConfig(optimizer_impl="vectorised")


@given(st.sampled_from([1, 2, 4, 8, 16]))
def test_fsdp_optimizer_scratch_falls_with_gpus(gpus: int) -> None:
    """The foreach copy is of the local shard: FSDP's scratch is 1/N of DDP's."""
    cfg = TrainingConfig(global_batch=2 * gpus, micro_batch=2, optimizer_impl="foreach")
    ddp = simulate_step(get_strategy("ddp"), toy_context(gpus, cfg)).run.memory.category_max["temp"]
    fsdp = simulate_step(get_strategy("fsdp"), toy_context(gpus, cfg)).run.memory.category_max["temp"]
    assert ddp > 0 and fsdp == pytest.approx(ddp / gpus)


def test_relu_output_saved_once_with_the_next_convolution() -> None:
    """ReLU saves its output and the next convolution saves the same tensor as its input."""
    net = NetBuilder((3, 8, 8), "fp32")
    net.conv(4, 3, name="conv1")
    net.act("relu")
    net.conv(4, 3, name="conv2")
    saved = [layer.activation_bytes for layer in net.layers]
    assert saved == [3 * 64 * 4, 4 * 64 * 4, 0.0]
    gelu = NetBuilder((3, 8, 8), "fp32")
    gelu.conv(4, 3, name="conv1")
    gelu.act("gelu")  # saves its input; its output is a new tensor the next layer saves
    gelu.conv(4, 3, name="conv2")
    assert [layer.activation_bytes for layer in gelu.layers] == [3 * 64 * 4, 4 * 64 * 4, 4 * 64 * 4]
