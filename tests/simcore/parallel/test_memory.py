"""Per-layer activations against Korthikanti et al. 2022's formulas, and where parameters live."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.parallel.memory import activation_bytes_per_layer, stage_states
from simcore.parallel.pp import partition_stages
from simcore.parallel.recompute import apply_recompute, held_bytes
from simcore.parallel.shard import ShardSpec, shard_layer
from tests.simcore.parallel.support import small_gpt

S, H, A = 512, 512, 8  # the small model's sequence, hidden size and heads


def _block_held(tp: int, sp: bool, recompute: str) -> float:
    """Bytes per sequence one rank keeps for one transformer block of the small model."""
    workload = small_gpt(flash=False)
    spec = ShardSpec(tp=tp, sequence_parallel=sp)
    indices = [i for i, layer in enumerate(workload.layers) if layer.block in (0, 1)]
    layers = [shard_layer(workload.layers[i], workload.dims, spec, 2) for i in indices]  # type: ignore[arg-type]
    mode = "every" if recompute == "full" else recompute
    plan = apply_recompute(layers, [workload.layers[i].block for i in indices], mode, 2)
    block1 = [layer for layer in plan.layers if layer.block == 1]
    block0 = [layer for layer in plan.layers if layer.block == 0]
    if recompute == "full":
        # the checkpointed block keeps only its input (the previous block's output) ...
        return held_bytes(block0, False)
    return held_bytes(block1, False)


@pytest.mark.parametrize(
    ("tp", "sp", "recompute"),
    [
        (t, sp, r)
        for t, sp, r in itertools.product((1, 2, 4, 8), (False, True), ("none", "selective", "full"))
        if t > 1 or not sp
    ],
)
def test_activations_per_layer_match_the_papers_formulas(tp: int, sp: bool, recompute: str) -> None:
    expected = activation_bytes_per_layer(S, 1, H, A, tp=tp, sequence_parallel=sp, recompute=recompute)
    assert _block_held(tp, sp, recompute) == pytest.approx(expected, rel=1e-12)


def test_the_formulas_themselves() -> None:
    sbh = S * H
    assert activation_bytes_per_layer(S, 1, H, A) == sbh * (34 + 5 * A * S / H)
    assert activation_bytes_per_layer(S, 1, H, A, tp=8) == sbh * (10 + 24 / 8 + 5 * A * S / (H * 8))
    assert (
        activation_bytes_per_layer(S, 1, H, A, tp=8, sequence_parallel=True, recompute="selective")
        == sbh * 34 / 8
    )
    assert activation_bytes_per_layer(S, 2, H, A, recompute="full") == 2 * 2 * sbh


def test_full_recompute_keeps_the_block_input_split_by_sequence_parallelism() -> None:
    workload = small_gpt(flash=False)
    spec = ShardSpec(tp=4, sequence_parallel=True)
    layers = [shard_layer(layer, workload.dims, spec, 2) for layer in workload.layers]  # type: ignore[arg-type]
    held = held_bytes([layer for layer in layers if layer.block in (0, 1)], True)
    assert held == pytest.approx(
        2 * activation_bytes_per_layer(S, 1, H, A, tp=4, sequence_parallel=True, recompute="full")
    )


@settings(max_examples=30, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 8),
    tied=st.booleans(),
    sp=st.booleans(),
)
def test_per_stage_model_states_sum_to_the_models(tp: int, pp: int, tied: bool, sp: bool) -> None:
    """Summed over stages, each stage's split parameters (over its tp shards) plus the ones every
    tensor rank holds whole are the model's parameters; a rank holds split/tp + whole."""
    workload = small_gpt(tied=tied)
    spec = ShardSpec(tp=tp, sequence_parallel=sp)
    stages = stage_states(workload, partition_stages(workload, pp), spec)
    assert sum(s.unique_params for s in stages) == workload.params
    for s in stages:
        assert s.per_rank_params * tp - s.whole_params * (tp - 1) == pytest.approx(s.unique_params)


def test_pipeline_stages_keep_embedding_first_and_head_last() -> None:
    workload = small_gpt()
    stages = partition_stages(workload, 3)
    names = [[workload.layers[i].name for i in stage] for stage in stages]
    assert names[0][0] == "embed" and names[-1][-2:] == ["lm_head", "loss"]
    blocks = [
        len({workload.layers[i].block for i in stage if workload.layers[i].block >= 0}) for stage in stages
    ]
    assert blocks == [3, 3, 2]
    assert sorted(i for stage in stages for i in stage) == list(range(len(workload.layers)))


def test_dtensor_tp_saves_the_gathered_input_of_its_column_linears() -> None:
    """Sequence parallel at tp 4: Megatron's column linears save their sequence shard (1/4 of the
    input), torch DTensor's (torchtitan) the all-gathered input; row linears and norms are the same
    either way, and the head's fp32 logits stay split over the vocabulary."""
    workload = small_gpt(flash=False)
    dims = workload.dims
    shard, gathered = (ShardSpec(tp=4, sequence_parallel=True, saved_input=s) for s in ("shard", "gathered"))
    for layer in workload.layers:
        a = shard_layer(layer, dims, shard, 2)  # type: ignore[arg-type]
        b = shard_layer(layer, dims, gathered, 2)  # type: ignore[arg-type]
        role = layer.name.rsplit(".", 1)[-1]
        if role in ("attn_qkv", "mlp_in"):
            assert b.activation_bytes == pytest.approx(4 * a.activation_bytes)
            assert b.activation_bytes == pytest.approx(layer.activation_bytes)
        elif role == "lm_head":
            logits = 4 * S * dims.vocab  # type: ignore[union-attr]  # fp32 logits per sample
            assert b.activation_bytes - a.activation_bytes == pytest.approx(
                (layer.activation_bytes - logits) * 3 / 4
            )
        else:
            assert b.activation_bytes == a.activation_bytes
        assert (b.fwd_flops, b.output_bytes) == (a.fwd_flops, a.output_bytes)
