"""torchtitan's per-op selective checkpointing, counted by hand on one Llama-style block: the bytes
it keeps, the FLOPs it reruns, the every-second-mm rule, biases (addmm) and FP8 (_scaled_mm)
saved, and the composed step that runs it."""

from __future__ import annotations

import functools
import math

import pytest

from simcore.compute.checkpointing import selective_op_policy
from simcore.parallel import ParallelLayout, ParallelOptions
from simcore.parallel.recompute import apply_recompute
from simcore.parallel.step import compose_parallel_step
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import Workload
from tests.simcore.parallel.support import cluster

S, H, HEADS, KV, FFN = 256, 512, 8, 2, 1024  # head width 64: q 512 wide, k and v 128 each
E = 2  # bf16


@functools.cache
def _llama(bias: bool = False, layers: int = 1) -> Workload:
    shape = TransformerShape(
        layers=layers, hidden=H, heads=HEADS, kv_heads=KV, ffn=FFN, vocab=1024, seq_len=S,
        gated_ffn=True, norm="rmsnorm", bias=bias, positions="rotary", dropout=False,
        tied_embeddings=False, activation="silu",
    )  # fmt: skip
    return build_workload("tiny-llama", shape, seq_len=None, dtype="bf16", source="test")


def _block(workload: Workload) -> list:
    return [layer for layer in workload.layers if layer.block == 0]


def _policy(workload: Workload, fp8: bool = False):
    assert workload.dims is not None
    return selective_op_policy(
        _block(workload), workload.dims, sequence_parallel=False, elem=E, fp8_linears=fp8
    )


def test_a_llama_block_keeps_q_v_attention_w1_and_w2_outputs() -> None:
    # wq 1 saved, wk 2 recomputed, wv 3 saved, wo 4 recomputed, w1 5 saved, w3 6 recomputed, w2 7 saved.
    q, v = S * 512 * E, S * 128 * E
    attention = S * 512 * E + S * HEADS * 4  # output + fp32 log-sum-exp per head
    w1, w2 = S * FFN * E, S * H * E
    workload = _llama()
    policy = _policy(workload)
    assert sum(p.saved_bytes for p in policy) == q + v + attention + w1 + w2
    saved = {
        layer.name.split(".")[-1]: p.saved_bytes for layer, p in zip(_block(workload), policy, strict=True)
    }
    assert saved["attn_qkv"] == q + v and saved["attn_out"] == 0 and saved["mlp_in"] == w1
    assert saved["norm1"] == saved["rotary"] == saved["mlp_act"] == saved["residual2"] == 0


def test_a_llama_block_reruns_wk_wo_w3_and_every_cheap_op() -> None:
    wk, wo, w3 = 2 * S * H * 128, 2 * S * 512 * H, 2 * S * H * FFN
    workload = _llama()
    policy = _policy(workload)
    layers = _block(workload)
    gemm = sum(p.compute_share * lay.fwd_flops for lay, p in zip(layers, policy, strict=True))
    assert gemm == pytest.approx(wk + wo + w3, rel=1e-12)
    rerun = {lay.name.split(".")[-1] for lay, p in zip(layers, policy, strict=True) if p.compute_share == 1.0}
    assert rerun == {"norm1", "rotary", "attn_out", "residual1", "norm2", "mlp_act", "residual2"}


def test_linears_with_a_bias_run_as_addmm_and_are_all_saved() -> None:
    policy = _policy(_llama(bias=True))
    layers = _block(_llama(bias=True))
    for lay, p in zip(layers, policy, strict=True):
        if lay.kind == "linear":
            assert p.compute_share == 0.0 and p.saved_bytes == lay.output_bytes


def test_fp8_linears_run_as_scaled_mm_and_are_all_saved() -> None:
    layers = _block(_llama())
    for lay, p in zip(layers, _policy(_llama(), fp8=True), strict=True):
        if lay.kind == "linear":
            assert p.compute_share == 0.0 and p.saved_bytes == lay.output_bytes


def test_the_recompute_plan_holds_the_input_and_reruns_before_the_block_s_last_backward() -> None:
    workload = _llama(layers=2)
    layers = list(workload.layers)
    plan = apply_recompute(
        layers, [lay.block for lay in layers], "selective-op", 1, dims=workload.dims, elem=E
    )
    first = [i for i, lay in enumerate(layers) if lay.block == 1]
    held = sum(plan.layers[i].activation_bytes for i in first)
    input_bytes = S * H * E
    expected = input_bytes + S * 512 * E + S * 128 * E + S * 512 * E + S * HEADS * 4 + S * FFN * E + S * H * E
    assert held == expected
    assert plan.rerun[first[-1]] and all(not plan.rerun[i] for i in first[:-1])
    before = sum(layers[i].activation_bytes for i in first)
    assert plan.transient_bytes == pytest.approx(before - held)
    assert len(plan.rerun_shares(first[-1])) == len(plan.rerun[first[-1]])


def test_the_composed_step_pays_between_selective_and_full() -> None:
    workload = load_workload("llama2-7b", seq_len=2048)  # GPU-bound (a tiny model is host-bound)
    config = TrainingConfig(global_batch=16, micro_batch=2)
    topology = cluster("hgx-h100", 8)  # FSDP: activations set the peak

    def run(mode: str, path: str = "fast"):
        options = ParallelOptions(recompute=mode)
        return compose_parallel_step(workload, config, topology, "fsdp", ParallelLayout(), options, path=path)

    none, op, full = run("none"), run("selective-op"), run("full")
    assert none.report.step_time_s < op.report.step_time_s < full.report.step_time_s
    assert full.report.peak_memory_bytes < op.report.peak_memory_bytes < none.report.peak_memory_bytes
    des = run("selective-op", "des")
    assert math.isclose(des.report.step_time_s, op.report.step_time_s, rel_tol=1e-9)
