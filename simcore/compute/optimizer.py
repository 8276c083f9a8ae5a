"""The optimizer step as torch.optim runs it: bytes moved, kernels launched and host work.

One step of an implementation (``data/efficiency.yaml``, section ``optimizers``, each figure
with its source in torch's code):

- ``foreach`` (torch's default on GPUs): each operation of the update (AdamW: weight decay,
  ``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_``) is one
  ``_foreach_*`` call over every parameter: a *pass* over all of them. A pass moves ``accesses x
  element bytes`` per parameter (AdamW: 20 element accesses, 80 B per fp32 parameter over 8
  passes) and launches ``multi_tensor_apply`` kernels of at most ``max_tensors(depth)`` tensors and
  ``max_blocks x 65536`` elements each;
- ``fused`` (``fused=True``; DeepSpeed's and Apex's FusedAdam): one kernel reads the parameter,
  gradient and states and writes the parameter and states once (AdamW: 7 accesses, 28 B);
- ``single`` (the for-loop; torch's default on CPUs): the same operations as foreach, but one
  kernel per operation per parameter tensor, so the host dispatches ``ops x tensors`` operators.

The step's device time is its bytes at the achieved memory bandwidth plus one launch gap per
kernel; its host time is one dispatch per operator call. On a GPU the host enqueues ahead of the
device, so the step takes the longer of the two; on a CPU rank the host does the arithmetic, so
they add. With fp32 master weights (mixed precision) the step also up-casts the low-precision
gradients into fp32 (``2 + 4`` B per parameter) and copies the updated master weights back into
the low-precision parameters (``4 + 2`` B): :func:`master_cast_bytes`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simcore.data import data_file
from simcore.errors import TrainsimError

__all__ = [
    "IMPL_ALIASES",
    "OPTIMIZER_IMPLS",
    "OptimizerSpec",
    "OptimizerStepCost",
    "master_cast_bytes",
    "optimizer_names",
    "optimizer_spec",
    "optimizer_step_cost",
    "resolve_optimizer_impl",
]

# "auto" picks what the framework picks for the device (see resolve_optimizer_impl).
OPTIMIZER_IMPLS = ("auto", "foreach", "fused", "single")
# Accepted spellings of the same implementations.
IMPL_ALIASES = {"single-tensor": "single", "for-loop": "single", "multi-tensor": "foreach"}

_DATA_FILE = Path(__file__).parent.parent / "data" / "efficiency.yaml"


# The optimizers the step model implements (each has an update rule below and a table entry); the
# data file's ``optimizers.kinds`` must name exactly these. Kept in code so that listing them (every
# --help) reads no data file.
OPTIMIZER_KINDS = ("sgd", "sgd-momentum", "adam", "adamw")


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    table = dict(data_file(_DATA_FILE.name)["optimizers"])
    if tuple(table["kinds"]) != OPTIMIZER_KINDS:
        raise TrainsimError(
            f"{_DATA_FILE.name}: optimizers.kinds lists {', '.join(table['kinds'])}; "
            f"the step model implements exactly {', '.join(OPTIMIZER_KINDS)}"
        )
    return table


@dataclass(frozen=True, slots=True)
class OptimizerSpec:
    """How one optimizer's update touches memory (see the module docstring)."""

    name: str
    foreach_accesses: tuple[int, ...]  # element accesses (reads + writes) of each foreach pass
    fused_accesses: int  # element accesses of the fused kernel
    host_ops_per_tensor: int  # operators the single-tensor loop dispatches per parameter tensor
    # torch.optim's per-parameter state (exp_avg, exp_avg_sq; momentum_buffer), one element per
    # parameter each, in the dtype of what the optimizer updates
    state_tensors: tuple[str, ...]


def optimizer_names() -> tuple[str, ...]:
    """The optimizers modelled (the data file lists the same, in this order)."""
    return OPTIMIZER_KINDS


def optimizer_spec(optimizer: str) -> OptimizerSpec:
    """The spec of ``optimizer`` (``sgd``, ``sgd-momentum``, ``adam``, ``adamw``)."""
    table = _table()["kinds"]
    entry = table.get(optimizer)
    if entry is None:
        raise TrainsimError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(table)}")
    return OptimizerSpec(
        optimizer,
        tuple(int(a) for a in entry["foreach_accesses"]),
        int(entry["fused_accesses"]),
        int(entry["host_ops_per_tensor"]),
        tuple(str(name) for name in entry["state_tensors"]),
    )


def canonical_impl(impl: str) -> str:
    """``impl`` under its canonical name; a :class:`TrainsimError` naming the allowed ones otherwise."""
    name = IMPL_ALIASES.get(impl, impl)
    if name not in OPTIMIZER_IMPLS:
        raise TrainsimError(
            f"optimizer implementation {impl!r} unknown; allowed: {', '.join(OPTIMIZER_IMPLS)}"
        )
    return name


def resolve_optimizer_impl(impl: str, device_kind: str, framework: str = "torch") -> str:
    """The implementation in force: ``impl``, or what the framework runs by default on the device.

    torch.optim (``torch/optim/optimizer.py``, ``_default_to_fused_or_foreach``, torch 2.13): foreach
    when every parameter is a plain tensor (or DTensor) on a device with foreach kernels (CUDA, XPU,
    ...; ``torch/utils/_foreach_utils.py``), the single-tensor loop otherwise (CPU); fused is never
    the default. DeepSpeed (``framework="deepspeed"``) builds its FusedAdam for Adam/AdamW on GPUs
    (``deepspeed/runtime/engine.py``, ``_configure_basic_optimizer``).
    """
    name = canonical_impl(impl)
    if name != "auto":
        return name
    if device_kind == "cpu":
        return "single"
    return "fused" if framework == "deepspeed" else "foreach"


def check_impl_supported(impl: str, device_kind: str, device_name: str) -> None:
    """A :class:`TrainsimError` when ``impl`` has no kernels on this kind of device.

    torch 2.13 has fused optimizer kernels for CUDA, CPU, MPS, XPU, HPU and MTIA
    (``_get_fused_kernels_supported_devices``); the data file lists the device kinds that have them.
    """
    kinds = _table()["fused_device_kinds"]
    if impl == "fused" and device_kind not in kinds:
        raise TrainsimError(
            f"--optimizer-impl fused: {device_name} ({device_kind}) has no fused optimizer kernels "
            f"(torch has them on: {', '.join(kinds)}); use foreach or single"
        )


@dataclass(frozen=True, slots=True)
class OptimizerStepCost:
    """One optimizer step of one rank: what it moves and launches, and the host's operator calls."""

    impl: str
    bytes_moved: float  # device-memory traffic of the update (and master casts)
    kernels: int  # kernels the device runs
    host_ops: int  # operators the host dispatches (foreach: one per pass)
    passes: int  # passes over the parameters


def _foreach_launches(accesses: int, tensors: int, elements: float) -> int:
    """multi_tensor_apply launches of one foreach pass over ``tensors`` tensors of ``elements``."""
    limits = _table()["multi_tensor_apply"]
    depth = min(max(accesses - 1, 1), len(limits["max_tensors"]))  # tensor lists: inputs + output
    by_tensors = math.ceil(tensors / int(limits["max_tensors"][depth - 1]))
    by_blocks = math.ceil(elements / (int(limits["max_blocks"]) * int(limits["chunk_elements"])))
    return max(1, by_tensors, by_blocks)


def master_cast_bytes(params: float, low_bytes: int) -> float:
    """Bytes of the mixed-precision casts around an fp32-master update of ``params`` parameters:
    gradients up-cast into fp32 (read low, write 4) and master weights copied back (read 4, write low)."""
    return 2.0 * params * (low_bytes + 4)


def optimizer_step_cost(
    optimizer: str, impl: str, params: float, tensors: int, state_bytes: int
) -> OptimizerStepCost:
    """The update of ``params`` elements held in ``tensors`` tensors, states of ``state_bytes`` each.

    ``impl`` must be resolved (foreach, fused or single).
    """
    spec = optimizer_spec(optimizer)
    if params <= 0 or tensors <= 0:
        return OptimizerStepCost(impl, 0.0, 0, 0, 0)
    if impl == "fused":
        launches = max(1, _foreach_launches(spec.fused_accesses, tensors, params))
        return OptimizerStepCost(impl, params * spec.fused_accesses * state_bytes, launches, 1, 1)
    moved = params * sum(spec.foreach_accesses) * state_bytes
    passes = len(spec.foreach_accesses)
    if impl == "foreach":
        launches = sum(_foreach_launches(a, tensors, params) for a in spec.foreach_accesses)
        return OptimizerStepCost(impl, moved, launches, passes, passes)
    if impl == "single":
        calls = tensors * spec.host_ops_per_tensor
        return OptimizerStepCost(impl, moved, tensors * passes, calls, passes)
    raise TrainsimError(f"optimizer implementation {impl!r} is not resolved; allowed: foreach, fused, single")
