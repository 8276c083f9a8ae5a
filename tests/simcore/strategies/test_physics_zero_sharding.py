"""ZeRO's model-state sharding (Rajbhandari et al. 2020, sec. 5.1 and Figure 1), counted by hand.

With Psi parameters, N data-parallel ranks and K optimizer bytes per parameter, mixed-precision
training holds per GPU: DDP (2 + 2 + K) Psi, ZeRO-1 (P_os) 2 Psi + 2 Psi + K Psi / N, ZeRO-2
(P_os+g) 2 Psi + (2 + K) Psi / N, ZeRO-3 (P_os+g+p) (2 + 2 + K) Psi / N. FSDP shards like ZeRO-3;
HSDP like FSDP over the GPUs of one node.
"""

from __future__ import annotations

import pytest

from simcore.compute.memory import model_state_bytes
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer

K = 12  # mixed-precision Adam: fp32 master, momentum, variance (sec. 3.1)


def test_figure_1_of_the_paper() -> None:
    """Psi = 7.5 B, N = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per device."""
    psi, n = 7_500_000_000, 64
    totals = [sum(model_state_bytes(stage, psi, n, 2, 2, K).values()) / 1e9 for stage in range(4)]
    assert totals == pytest.approx([120.0, 31.40625, 16.640625, 1.875], rel=1e-12)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_each_category_by_stage(stage: int) -> None:
    psi, n = 1_000_000, 8
    got = model_state_bytes(stage, psi, n, 2, 2, K)
    expected = {
        0: {"params": 2 * psi, "grads": 2 * psi, "optimizer": K * psi},
        1: {"params": 2 * psi, "grads": 2 * psi, "optimizer": K * psi / n},
        2: {"params": 2 * psi, "grads": 2 * psi / n, "optimizer": K * psi / n},
        3: {"params": 2 * psi / n, "grads": 2 * psi / n, "optimizer": K * psi / n},
    }[stage]
    assert got == pytest.approx(expected, rel=1e-12)


PSI = toy_transformer().params  # 4 M embedding + 4 x 3 x 2 M block layers + 1 M head
GPUS, PER_NODE = 16, 8


def _initial(name: str) -> dict[str, float]:
    config = TrainingConfig(global_batch=GPUS * 2, micro_batch=2, precision="mixed", optimizer="adamw")
    plan = get_strategy(name).build_plan(toy_context(GPUS, config, per_node=PER_NODE))
    return plan.initial_memory


def test_the_toy_model_has_the_parameters_counted_by_hand() -> None:
    assert PSI == 4_000_000 + 4 * 3 * 2_000_000 + 1_000_000


@pytest.mark.parametrize(
    ("name", "params", "optimizer"),
    [
        ("ddp", 2 * PSI, K * PSI),
        ("zero1", 2 * PSI, K * PSI / GPUS),
        ("zero2", 2 * PSI, K * PSI / GPUS),
        ("zero3", 2 * PSI / GPUS, K * PSI / GPUS),
        ("fsdp", 2 * PSI / GPUS, K * PSI / GPUS),
        ("hsdp", 2 * PSI / PER_NODE, K * PSI / PER_NODE),  # sharded within a node only
    ],
)
def test_a_plan_starts_with_its_sharded_model_state(name: str, params: float, optimizer: float) -> None:
    """What the memory timeline starts with: parameters and optimizer state, full or 1/N."""
    initial = _initial(name)
    assert initial["params"] == pytest.approx(params, rel=1e-12)
    assert initial["optimizer"] == pytest.approx(optimizer, rel=1e-12)


def test_bucketed_strategies_start_with_their_reduction_buffers() -> None:
    """DDP's bucket copies are a second copy of the (bf16) gradients; DeepSpeed's contiguous
    reduction bucket holds min(Psi, reduce_bucket_size) gradient elements (the whole toy model)."""
    assert _initial("ddp")["buffers"] == pytest.approx(2 * PSI)
    assert _initial("zero1")["buffers"] == pytest.approx(2 * PSI)
    assert _initial("zero2")["buffers"] == pytest.approx(2 * PSI)
