"""Gradient buckets and gather units, counted by hand on small models.

- torch DDP (``torch/nn/parallel/distributed.py``): ``bucket_cap_mb=25`` and
  ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB; parameters are bucketed in reverse order and a
  bucket closes once its gradients reach the cap (``compute_bucket_assignment_by_size``);
- DeepSpeed ZeRO-1/2 (``deepspeed/runtime/zero/config.py``): ``reduce_bucket_size`` and
  ``allgather_bucket_size`` 5e8 elements;
- DeepSpeed ZeRO-3: parameters gathered (and gradients reduce-scattered) in groups of
  ``stage3_prefetch_bucket_size`` = 5e7 parameters, in forward order;
- FSDP: one reduce-scatter per wrapping unit, one all-gather per unit in forward and again in
  backward, except the root unit, which stays gathered from forward to backward.

Operations are counted by kind and bytes on the communication stream, never by label.
"""

from __future__ import annotations

from collections import Counter

import pytest

from simcore.step.plan import COMM, StepPlan
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.workload.types import Layer, Workload
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer

MiB = 2**20
FP32 = 4


def _model(block_params: list[int], embed: int, head: int) -> Workload:
    """An embedding, one linear per block, a head: only the parameter counts matter here."""
    layers = [Layer("embed", "embedding", -1, embed, 0.0, 0.0, 1e3, 1e3, 1e3)]
    for b, params in enumerate(block_params):
        layers.append(Layer(f"block{b}.fc", "linear", b, params, 1e6, 2e6, 1e3, 1e3, 1e3))
    layers.append(Layer("head", "linear", -1, head, 1e6, 2e6, 1e3, 1e3, 1e3))
    names = tuple(f"block{b}" for b in range(len(block_params)))
    return Workload("buckets", tuple(layers), names, "fp32", 0, "test")


def _comm(plan: StepPlan, kind: str) -> list[float]:
    return [op.bytes for op in plan.ops if op.stream == COMM and op.kind == kind]


def _plan(name: str, workload: Workload, **config: object) -> StepPlan:
    cfg = TrainingConfig(global_batch=4, micro_batch=2, dtype="fp32", **config)  # type: ignore[arg-type]
    return get_strategy(name).build_plan(toy_context(2, cfg, workload=workload))


def test_ddp_caps_are_torchs_defaults() -> None:
    """What every DDP and the fast path plan with unless told otherwise."""
    config = TrainingConfig()
    assert (config.bucket_size_bytes, config.first_bucket_bytes) == (25 * MiB, 1 * MiB)


def test_ddp_buckets_of_a_small_model_by_hand() -> None:
    """Eight 6 MiB layers between a 4 MiB embedding and a 0.25 MiB head (fp32 gradients).

    In reverse: head (0.25 MiB, under 1 MiB) + block 7 -> bucket 0 (6.25 MiB); blocks 6..2 reach
    30 MiB >= 25 MiB -> bucket 1; blocks 1, 0 and the embedding are left -> bucket 2 (16 MiB).
    """
    layer = 6 * MiB // FP32
    model = _model([layer] * 8, embed=4 * MiB // FP32, head=MiB // 4 // FP32)
    expected = [6.25 * MiB, 30 * MiB, 16 * MiB]
    assert _comm(_plan("ddp", model), "all_reduce") == expected
    assert sum(expected) == model.params * FP32


def test_zero_reduce_and_gather_buckets_of_5e8_elements() -> None:
    """Blocks of 2e8 parameters: in reverse, head 5e7 + blocks 3, 2, 1 reach 6.5e8 >= 5e8 elements
    (bucket 0), block 0 and the embedding are bucket 1; the updated parameters are all-gathered
    5e8 elements at a time: 5e8, then 4.5e8."""
    model = _model([200_000_000] * 4, embed=100_000_000, head=50_000_000)
    for name in ("zero1", "zero2"):
        plan = _plan(name, model)
        assert _comm(plan, "all_reduce") == [6.5e8 * FP32, 3e8 * FP32]
        assert _comm(plan, "all_gather") == [5e8 * FP32, 4.5e8 * FP32]


def test_zero3_prefetch_buckets_of_5e7_parameters() -> None:
    """In forward order: embedding 1e7 + blocks 0, 1 reach 5e7 (group 0); blocks 2, 3 and the head
    (4.5e7) are group 1. Each group is reduce-scattered once and gathered in forward and backward."""
    model = _model([20_000_000] * 4, embed=10_000_000, head=5_000_000)
    plan = _plan("zero3", model)
    assert _comm(plan, "reduce_scatter") == [4.5e7 * FP32, 5e7 * FP32]  # backward: last group first
    assert Counter(_comm(plan, "all_gather")) == {5e7 * FP32: 2, 4.5e7 * FP32: 2}


@pytest.mark.parametrize(
    ("wrap", "unit_layers"),
    [
        ("per-block", [3, 3, 3, 3]),  # four blocks of three 2 M-parameter layers
        ("every-2-blocks", [6, 6]),
        ("every-2-layers", [2] * 6),
        ("every-5-layers", [5, 5, 2]),  # counting layers across blocks
    ],
)
def test_fsdp_units_per_wrap_policy(wrap: str, unit_layers: list[int]) -> None:
    """The root (embedding 4 M + head 1 M parameters) plus the policy's units of 2 M-parameter layers:
    one reduce-scatter each, and an all-gather per unit in forward and again (root excepted) in
    backward."""
    plan = _plan("fsdp", toy_transformer(), wrap=wrap)
    root = (4_000_000 + 1_000_000) * FP32
    units = [n * 2_000_000 * FP32 for n in unit_layers]
    assert sorted(_comm(plan, "reduce_scatter")) == sorted([root, *units])
    gathers = Counter(_comm(plan, "all_gather"))
    assert gathers == Counter([root] + [u for u in units for _ in range(2)])
    kinds = Counter(op.kind for op in plan.ops if op.stream == COMM)
    assert kinds == {"reduce_scatter": 1 + len(units), "all_gather": 1 + 2 * len(units)}
