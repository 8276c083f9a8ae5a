"""Optimizer state bytes per parameter, counted by hand from torch.optim and the ZeRO paper.

torch.optim allocates per parameter, on the first step (``_init_group`` of ``adam.py``, ``adamw.py``,
``sgd.py``): Adam/AdamW ``exp_avg`` and ``exp_avg_sq`` (two tensors like the parameter), SGD with
momentum ``momentum_buffer`` (one), plain SGD nothing. Mixed precision adds the fp32 master copy
(Rajbhandari et al. 2020, sec. 3.1: K = 12 bytes for mixed-precision Adam = 4 master + 4 + 4).
"""

from __future__ import annotations

import pytest

from simcore.compute.optimizer import optimizer_names, optimizer_spec
from simcore.compute.precision import Precision
from simcore.compute.precision import resolve_precision as resolve_for_framework
from simcore.errors import TrainsimError
from simcore.strategies import get_strategy
from simcore.strategies.base import OPTIMIZERS, TrainingConfig, optimizer_state_bytes

FP32, BF16 = 4, 2

# state tensors per parameter, by hand from torch/optim/*.py
TORCH_STATE = {
    "sgd": (),
    "sgd-momentum": ("momentum_buffer",),
    "adam": ("exp_avg", "exp_avg_sq"),
    "adamw": ("exp_avg", "exp_avg_sq"),
}


def resolve_precision(mode: str, dtype: str, strategy: str) -> Precision:
    """The precision a registered strategy runs with, by its own framework."""
    return resolve_for_framework(mode, dtype, strategy, framework=get_strategy(strategy).framework)


def test_the_data_names_torchs_state_tensors() -> None:
    assert optimizer_names() == tuple(TORCH_STATE)
    for name, states in TORCH_STATE.items():
        assert optimizer_spec(name).state_tensors == states


def test_fp32_state_bytes_per_parameter() -> None:
    """``OPTIMIZERS``: 4 bytes per fp32 state tensor, master weights excluded."""
    assert dict(OPTIMIZERS) == {"sgd": 0, "sgd-momentum": 4, "adam": 8, "adamw": 8}
    assert all(type(v) is int for v in OPTIMIZERS.values())


@pytest.mark.parametrize(
    ("mode", "dtype", "optimizer", "expected"),
    [
        # fp32 training: the states in fp32, no master copy
        ("fp32", "fp32", "sgd", 0),
        ("fp32", "fp32", "sgd-momentum", 1 * FP32),
        ("fp32", "fp32", "adam", 2 * FP32),
        ("fp32", "fp32", "adamw", 2 * FP32),
        # autocast: fp32 parameters are what the optimizer updates (no separate master copy)
        ("amp", "bf16", "adamw", 2 * FP32),
        # Megatron/DeepSpeed mixed precision: fp32 master + fp32 states (ZeRO's K = 12 with Adam)
        ("mixed", "bf16", "adam", FP32 + 2 * FP32),
        ("mixed", "bf16", "adamw", 12),
        ("mixed", "fp16", "sgd-momentum", FP32 + FP32),
        ("mixed", "bf16", "sgd", FP32),
        # FSDP2 MixedPrecisionPolicy: the sharded fp32 parameters are the master; states fp32
        ("fsdp-mp", "bf16", "adamw", 2 * FP32),
        # pure low precision: the states take the parameters' dtype, no master
        ("pure", "bf16", "adamw", 2 * BF16),
        ("pure", "bf16", "sgd-momentum", 1 * BF16),
        ("pure", "bf16", "sgd", 0),
    ],
)
def test_state_bytes_by_precision(mode: str, dtype: str, optimizer: str, expected: int) -> None:
    strategy = "fsdp" if mode == "fsdp-mp" else "zero2"
    precision = resolve_precision(mode, dtype, strategy)
    assert optimizer_state_bytes(precision, optimizer) == expected


def test_the_zero_papers_sixteen_bytes_per_parameter() -> None:
    """2 (bf16 params) + 2 (bf16 grads) + 12 (fp32 master, momentum, variance) with Adam."""
    config = TrainingConfig(dtype="bf16", optimizer="adam", precision="mixed")
    assert config.param_bytes + config.grad_bytes + config.optimizer_bytes == 2 + 2 + 12


def test_unknown_optimizer_is_named() -> None:
    with pytest.raises(TrainsimError, match="unknown optimizer 'lion'; allowed: sgd, sgd-momentum, adam"):
        optimizer_state_bytes(resolve_precision("fp32", "fp32", "ddp"), "lion")


@pytest.mark.slow
def test_torch_allocates_what_the_table_says() -> None:
    """One step of each torch.optim optimizer on an fp32 parameter: its per-element state bytes."""
    torch = pytest.importorskip("torch")
    makers = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=0.1),
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.1),
    }
    n = 1000
    for name, make in makers.items():
        param = torch.nn.Parameter(torch.zeros(n))
        opt = make([param])
        param.grad = torch.ones(n)
        opt.step()
        state = opt.state[param]
        per_element = {k for k, v in state.items() if torch.is_tensor(v) and v.numel() == n}
        assert per_element == set(TORCH_STATE[name])
        bytes_per_param = sum(state[k].element_size() for k in per_element)
        assert bytes_per_param == OPTIMIZERS[name]
