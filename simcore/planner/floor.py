"""The floor a candidate's memory cannot go below, so candidates above the device's memory are
skipped untimed.

Two moments every step passes through, on the first pipeline stage's busiest GPU:

- the optimizer step, with the parameters, gradients and optimizer state the strategy keeps (ZeRO
  paper, Rajbhandari et al. 2020, sec. 5.1: :func:`simcore.compute.memory.model_state_bytes`, in
  the bytes per parameter the strategy's step plan uses: :func:`state_bytes`) all live;
- the end of the forward passes in flight, with their saved activations on top of the parameters
  and optimizer state.

Model parallelism: a GPU holds at least ``1 / (tp x pp)`` of the parameters (``1 / (tp x pp x
ep)`` of a mixture-of-experts model: the largest stage holds at least the mean, a tensor-parallel
rank at least ``1/tp`` of its stage, an expert-parallel rank ``1/ep`` of its experts), and the
strategy shards that over the stage's ``dp x cp`` data and context ranks (HSDP: at most one node's).
Activations: the first stage keeps its share (the layers before the first block and ``1/pp`` of the
blocks) of ``min(pp, m)`` micro-batches in flight under 1F1B, interleaved or ZB-H1, all ``m`` under
GPipe (Narayanan et al. 2021, sec. 2.2), each at least ``1 / (tp x cp)`` of the unsharded
activations (Korthikanti et al. 2022, Table 2: ``10 + 24/t`` >= ``34/t``); with context
parallelism the attention core (whose scores shrink faster than ``1/cp``) is left out, selective
recompute drops it, full or every-K recompute counts none (their kept block inputs are not
bounded here). Offload removes what it moves to the host: the optimizer state (``optimizer``),
every model state (``params``), the activations (``activations``).
"""

from __future__ import annotations

import math

from simcore.compute.memory import model_state_bytes
from simcore.planner.space import PlanLayout
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig, optimizer_state_bytes
from simcore.workload.types import Workload

__all__ = ["activation_floor_per_sample", "memory_floor_bytes", "state_bytes"]


def memory_floor_bytes(
    workload: Workload,
    config: TrainingConfig,
    layout: PlanLayout,
    gpus: int,
    node_size: int,
    memo: dict[tuple[object, ...], float] | None = None,
) -> float:
    """Bytes per GPU the step of ``layout`` cannot go below (see the module docstring).

    ``memo``: the caller's dict for the per-sample activation floors of one workload (a sweep
    computes each once)."""
    strategy = get_strategy(layout.strategy)
    stage, per_node = strategy.zero_stage, strategy.shard_scope == "node"
    lay, offload = layout.parallel, layout.options.offload
    group = lay.dp(gpus) * lay.cp
    shards = min(node_size, group) if per_node else group
    moe = workload.dims is not None and workload.dims.moe is not None
    params = workload.params / (lay.tp * lay.pp * (lay.ep if moe else 1))
    per_param = model_state_bytes(stage, 1, shards, *state_bytes(config, layout.strategy))
    states = {k: v * params for k, v in per_param.items()}
    if offload in ("optimizer", "params"):
        states["optimizer"] = 0.0
    if offload == "params":
        states["params"] = states["grads"] = 0.0
    at_optimizer = math.fsum(states.values())
    activations = 0.0
    if offload != "activations":
        micro = config.global_batch // (lay.dp(gpus) * layout.micro_batch)
        gpipe = layout.options.schedule == "gpipe" and lay.pp > 1  # one pipeline holds every micro-batch
        in_flight = micro if gpipe else min(lay.pp, micro)
        key = (layout.recompute, lay.tp, lay.pp, lay.cp)
        known = memo.get(key) if memo is not None else None
        per_sample = known if known is not None else activation_floor_per_sample(workload, layout)
        if memo is not None:
            memo[key] = per_sample
        activations = per_sample * layout.micro_batch * max(1, in_flight)
    at_forward = states["params"] + states["optimizer"] + activations
    return max(at_optimizer, at_forward) + (config.allocator_overhead_bytes or 0.0)


def state_bytes(config: TrainingConfig, strategy: str) -> tuple[int, int, int]:
    """Bytes per parameter of the parameters, gradients and optimizer state ``strategy`` keeps, as its
    step plan counts them (:meth:`TrainingConfig.precision_for`): DDP keeps fp32 parameters; the
    ZeRO family and FSDP keep 16-bit working parameters and gradients with the fp32 master copy in
    the optimizer state (:func:`simcore.strategies.base.optimizer_state_bytes`)."""
    precision = config.precision_for(get_strategy(strategy))
    return (
        precision.bytes("param"),
        precision.bytes("grad"),
        optimizer_state_bytes(precision, config.optimizer),
    )


def activation_floor_per_sample(workload: Workload, layout: PlanLayout) -> float:
    """Saved bytes per sample of one micro-batch on the first stage's GPU, at least."""
    mode = layout.recompute
    if mode != "none" and mode != "selective":
        return 0.0
    lay = layout.parallel
    skip_core = mode == "selective" or lay.cp > 1
    before = blocks = 0.0
    first_block = next(
        (i for i, layer in enumerate(workload.layers) if layer.block >= 0), len(workload.layers)
    )
    for i, layer in enumerate(workload.layers):
        if skip_core and layer.name.endswith("attn_core"):
            continue
        if layer.block >= 0:
            blocks += layer.activation_bytes
        elif lay.pp == 1 or i < first_block:
            before += layer.activation_bytes
    return (before + blocks / lay.pp) / (lay.tp * lay.cp)
