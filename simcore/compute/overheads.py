"""Host work of the data-parallel frameworks, in operator dispatches (``data/efficiency.yaml``).

FSDP2's per-unit hooks (unshard, reshard, the reduce-scatter bookkeeping) and per-parameter
DTensor handling, its DTensor optimizer, DDP's reducer (an autograd hook and a bucket copy per
parameter, a copy back per parameter at the end), DeepSpeed's per-module and per-parameter hooks:
each is a number of operator dispatches, priced at the host's per-operator cost (the device
defaults' ``host_op_s`` or a calibration profile's measured ``op_overhead_s``). The strategies
add them to the host side of the compute operations they belong to, so on a GPU they cost time only
when a unit's kernels are shorter than its host work (:meth:`simcore.strategies.base.StepContext.span_time`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from simcore.data import data_file

__all__ = ["FrameworkOverheads", "framework_overheads"]

_DATA_FILE = Path(__file__).parent.parent / "data" / "efficiency.yaml"


@dataclass(frozen=True, slots=True)
class FrameworkOverheads:
    """Operator dispatches of the frameworks' own host work (see ``data/efficiency.yaml``)."""

    fsdp2_unit_ops: tuple[float, float]  # (forward, backward) per unit per micro-batch
    fsdp2_tensor_ops: tuple[float, float]  # (forward, backward) per parameter tensor
    dtensor_op_factor: float  # one optimizer operator on a DTensor, in plain operators
    ddp_tensor_ops: tuple[float, float]  # (backward hook + copy-in, finalize copy-out) per tensor
    zero3_unit_ops: tuple[float, float]
    zero_tensor_ops: tuple[float, float]


def _pair(value: list[float]) -> tuple[float, float]:
    return float(value[0]), float(value[1])


@functools.lru_cache(maxsize=1)
def framework_overheads() -> FrameworkOverheads:
    """The figures of ``data/efficiency.yaml``, section ``frameworks``."""
    table = data_file(_DATA_FILE.name)["frameworks"]
    return FrameworkOverheads(
        fsdp2_unit_ops=_pair(table["fsdp2_unit_ops"]),
        fsdp2_tensor_ops=_pair(table["fsdp2_tensor_ops"]),
        dtensor_op_factor=float(table["dtensor_op_factor"]),
        ddp_tensor_ops=_pair(table["ddp_tensor_ops"]),
        zero3_unit_ops=_pair(table["zero3_unit_ops"]),
        zero_tensor_ops=_pair(table["zero_tensor_ops"]),
    )
