"""Tensor-parallel collectives per transformer block, counted by hand.

Megatron-LM (Shoeybi et al. 2019, sec. 3, Figure 3): the ``g`` operator after each row-parallel
linear all-reduces the block's output in forward and the ``f`` operator before each column-parallel
linear all-reduces the input gradient in backward: with an attention and an MLP per block, two
all-reduces in forward and two in backward, each of ``micro_batch x seq x hidden x dtype bytes``.
With sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) each becomes an all-gather plus a
reduce-scatter of the same buffer: per block two of each in forward and two of each in backward.
"""

from __future__ import annotations

import functools
from collections import Counter

import pytest

from simcore.collectives import collective_time
from simcore.compute.fp8 import compute_model, tp_gathers_in_fp8
from simcore.hardware import device_spec
from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.parallel.shard import ShardSpec
from simcore.parallel.tp import tensor_parallel_collectives
from simcore.strategies.base import TrainingConfig
from tests.simcore.parallel.support import cluster, small_gpt

MICRO_BATCH, SEQ, HIDDEN, BF16 = 1, 512, 512, 2  # small_gpt: hidden 512, sequence 512, bf16
HIDDEN_BYTES = MICRO_BATCH * SEQ * HIDDEN * BF16

WITHOUT_SP = {("fwd", "all_reduce"): 2, ("bwd", "all_reduce"): 2}
WITH_SP = {
    ("fwd", "all_gather"): 2,
    ("fwd", "reduce_scatter"): 2,
    ("bwd", "all_gather"): 2,
    ("bwd", "reduce_scatter"): 2,
}


@pytest.mark.parametrize(("sequence_parallel", "per_block"), [(False, WITHOUT_SP), (True, WITH_SP)])
@pytest.mark.parametrize("tp", [2, 4])
def test_collectives_of_each_block(
    sequence_parallel: bool, per_block: dict[tuple[str, str], int], tp: int
) -> None:
    workload = small_gpt(4)
    assert workload.dims is not None
    spec = ShardSpec(tp=tp, sequence_parallel=sequence_parallel)
    blocks: dict[int, Counter[tuple[str, str]]] = {}
    for layer in workload.layers:
        if layer.block < 0:
            continue
        for coll in tensor_parallel_collectives(layer, workload.dims, spec, MICRO_BATCH, BF16):
            assert coll.size_bytes == HIDDEN_BYTES  # nccl-tests size: the full hidden state
            blocks.setdefault(layer.block, Counter())[(coll.phase, coll.op)] += 1
    assert sorted(blocks) == [0, 1, 2, 3]
    assert all(counts == per_block for counts in blocks.values())


def test_no_tensor_parallelism_no_collectives() -> None:
    workload = small_gpt(4)
    assert workload.dims is not None
    assert all(
        not tensor_parallel_collectives(lay, workload.dims, ShardSpec(), 1, BF16) for lay in workload.layers
    )


@functools.cache
def _tp_comm_s(layers: int, sequence_parallel: bool) -> float:
    config = TrainingConfig(global_batch=2 * MICRO_BATCH, micro_batch=MICRO_BATCH)  # two micro-batches
    options = ParallelOptions(sequence_parallel=sequence_parallel)
    layout = ParallelLayout(tp=2)
    topology = cluster("dgx-a100", 2)
    return simulate_parallel_step(
        small_gpt(layers), config, topology, "ddp", layout, options
    ).report.tp_comm_s


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_a_steps_tp_time_grows_by_the_blocks_collectives(sequence_parallel: bool) -> None:
    """Four more blocks add, per micro-batch, 4 x 4 all-reduces (or 4 x 4 all-gathers and as many
    reduce-scatters) of the hidden state over the TP pair; the embedding and head terms cancel."""
    topology = cluster("dgx-a100", 2)

    def t(op: str) -> float:
        return collective_time(topology, op, HIDDEN_BYTES, (0, 1)).time_s

    per_block = 4 * (t("all_gather") + t("reduce_scatter")) if sequence_parallel else 4 * t("all_reduce")
    extra = _tp_comm_s(8, sequence_parallel) - _tp_comm_s(4, sequence_parallel)
    assert extra == pytest.approx(2 * 4 * per_block, rel=1e-9)


def test_fp8_tensorwise_gathers_move_one_byte_and_the_reduce_scatters_two() -> None:
    """torchao's float8 TP (tensorwise): per block the forward all-gathers (column inputs) and the
    backward all-gathers (row output gradients) move the hidden state in fp8, half of bf16's bytes;
    the four reduce-scatters stay bf16. Other layers keep their bytes."""
    workload = small_gpt(2)
    assert workload.dims is not None
    spec = ShardSpec(tp=2, sequence_parallel=True)
    for layer in workload.layers:
        plain = tensor_parallel_collectives(layer, workload.dims, spec, MICRO_BATCH, BF16)
        fp8 = tensor_parallel_collectives(layer, workload.dims, spec, MICRO_BATCH, BF16, gather_elem=1.0)
        dense = layer.block >= 0 and layer.kind == "linear"
        for a, b in zip(plain, fp8, strict=True):
            halved = dense and a.op == "all_gather"
            assert b.size_bytes == (HIDDEN_BYTES / 2 if halved else a.size_bytes), (layer.name, a.op)


def test_only_the_tensorwise_recipe_gathers_tp_activations_in_fp8() -> None:
    h100 = device_spec("h100-sxm")
    assert tp_gathers_in_fp8(compute_model(h100, "fp8", fp8="tensorwise"))
    assert not tp_gathers_in_fp8(compute_model(h100, "fp8", fp8="rowwise"))
    assert not tp_gathers_in_fp8(compute_model(h100, "fp8", fp8="delayed"))
    assert not tp_gathers_in_fp8(compute_model(h100, "bf16"))


def test_tensor_parallel_collectives_are_reported_as_communication_not_compute() -> None:
    """tp=2 alone (no data parallelism, no overlap): the step's TP collectives block the compute
    stream, so they are exposed communication (step - compute), and their bytes are the report's
    ``comm_bytes``: each collective's buffer, per micro-batch, over the two micro-batches."""
    config = TrainingConfig(global_batch=2 * MICRO_BATCH, micro_batch=MICRO_BATCH)
    workload = small_gpt(4)
    assert workload.dims is not None
    report = simulate_parallel_step(
        workload, config, cluster("dgx-a100", 2), "ddp", ParallelLayout(tp=2), ParallelOptions()
    ).report
    spec = ShardSpec(tp=2)
    by_hand = 2 * sum(
        coll.size_bytes
        for layer in workload.layers
        for coll in tensor_parallel_collectives(layer, workload.dims, spec, MICRO_BATCH, BF16)
    )
    assert report.tp_comm_s > 0
    assert report.exposed_comm_s == pytest.approx(report.tp_comm_s, rel=1e-9)
    assert report.compute_s == pytest.approx(report.step_time_s - report.tp_comm_s, rel=1e-9)
    assert report.comm_bytes == pytest.approx(by_hand, rel=1e-12)
