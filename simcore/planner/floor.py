"""The floor a candidate's memory cannot go below, so candidates above the device's memory are
skipped untimed.

Every byte it counts is one the step plans (:mod:`simcore.strategies`) and the composed step's
stage peak (:mod:`simcore.parallel.step`) also count for that layout, so it is a true lower bound
of the simulated peak (tested against it). Two moments every step passes through, on the first
pipeline stage's busiest GPU:

- the optimizer step, with the parameters, gradients and optimizer state the strategy keeps (ZeRO
  paper, Rajbhandari et al. 2020, sec. 5.1: :func:`simcore.compute.memory.model_state_bytes`, in
  the bytes per parameter the strategy's step plan uses: :func:`state_bytes`) all live, beside
  the communication buffers held all step (DDP's bucket copies of the gradients, torch's default
  ``gradient_as_bucket_view=False``; DeepSpeed ZeRO-1/2's reduction bucket of at most
  ``reduce_bucket_size`` elements) and the optimizer step's scratch where it is linear in the
  local parameters (torch's foreach Adam/AdamW: one copy of them,
  :func:`simcore.compute.memory.optimizer_step_temp_bytes`);
- the end of the forward passes in flight, with their saved activations on top of the parameters,
  optimizer state and buffers.

On top of either: the runtime's overhead (CUDA context and one communicator's NCCL buffers,
``data/efficiency.yaml``, as every plan's initial memory) and the caching allocator's
fragmentation on the tensors (charged on the tensors at the peak:
:func:`simcore.compute.memory.allocator_peak`; ``allocator_overhead_bytes`` given: that, and none).

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
every model state (``params``; the buffers and the optimizer step's scratch stay on the device,
as :func:`simcore.parallel.offload.offload_effect` leaves them), the activations (``activations``).
"""

from __future__ import annotations

import math

from simcore.compute.memory import model_state_bytes, optimizer_step_temp_bytes
from simcore.compute.optimizer import resolve_optimizer_impl
from simcore.planner.space import PlanLayout
from simcore.strategies import get_strategy
from simcore.strategies.base import Strategy, TrainingConfig, optimizer_state_bytes
from simcore.workload.types import Workload

__all__ = ["activation_floor_per_sample", "memory_floor_bytes", "state_bytes"]


def memory_floor_bytes(
    workload: Workload,
    config: TrainingConfig,
    layout: PlanLayout,
    gpus: int,
    node_size: int,
    memo: dict[tuple[object, ...], float] | None = None,
    *,
    device_kind: str = "gpu",
) -> float:
    """Bytes per GPU the step of ``layout`` cannot go below (see the module docstring).

    ``memo``: the caller's dict for the per-sample activation floors of one workload (a sweep
    computes each once); ``device_kind``: the gating device's kind (``gpu``, ``cpu``), whose
    runtime overhead and allocator fragmentation every step plan charges."""
    strategy = get_strategy(layout.strategy)
    stage, per_node = strategy.zero_stage, strategy.shard_scope == "node"
    lay, offload = layout.parallel, layout.options.offload
    group = lay.dp(gpus) * lay.cp
    shards = min(node_size, group) if per_node else group
    moe = workload.dims is not None and workload.dims.moe is not None
    params = workload.params / (lay.tp * lay.pp * (lay.ep if moe else 1))
    param_b, grad_b, optimizer_b = state_bytes(config, layout.strategy)
    per_param = model_state_bytes(stage, 1, shards, param_b, grad_b, optimizer_b)
    states = {k: v * params for k, v in per_param.items()}
    buffers = _buffer_bytes(config, stage, strategy.framework, params, group, grad_b)
    scratch = _scratch_bytes(config, strategy, params, stage, group, shards, device_kind)
    if offload in ("optimizer", "params"):
        states["optimizer"] = 0.0
    if offload == "params":  # the device keeps about two layers' working copies: counted as none
        states["params"] = states["grads"] = 0.0
    at_optimizer = math.fsum(states.values()) + buffers + scratch
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
    at_forward = states["params"] + states["optimizer"] + buffers + activations
    tensors = max(at_optimizer, at_forward)
    # every strategy's plan starts from the runtime's overhead (one communicator at least) and the
    # allocator charges its fragmentation on the tensors at the peak (simcore.compute.memory)
    overhead = config.runtime_overhead_bytes(device_kind, 1)
    return tensors * (1.0 + config.fragmentation(device_kind)) + overhead


def _buffer_bytes(
    config: TrainingConfig, stage: int, framework: str, params: float, group: int, grad_bytes: int
) -> float:
    """Communication buffers a rank holds from the start of the step: DDP's bucket copies of the
    gradients (``gradient_as_bucket_view=False``, torch's default), DeepSpeed ZeRO-1/2's contiguous
    reduction bucket (``reduce_bucket_size`` elements, at most the model) when it communicates;
    FSDP and ZeRO-3 none (their gathered units come and go)."""
    if stage == 0:
        return 0.0 if config.gradient_as_bucket_view else params * grad_bytes
    if stage in (1, 2) and framework == "deepspeed" and group > 1:
        return min(params, float(config.zero_bucket_elements)) * grad_bytes
    return 0.0


def _scratch_bytes(
    config: TrainingConfig,
    strategy: Strategy,
    params: float,
    stage: int,
    group: int,
    shards: int,
    device_kind: str,
) -> float:
    """The optimizer step's scratch (``temp``) on the rank's local parameters, where it is linear in
    them (:func:`simcore.compute.memory.optimizer_step_temp_bytes`: foreach's one copy of every local
    parameter; the single-tensor loop's, of the largest tensor, counted as none here, fused none)."""
    impl = resolve_optimizer_impl(config.optimizer_impl, device_kind, strategy.framework)
    if impl != "foreach":
        return 0.0
    local = params if stage == 0 else params / (group if stage in (1, 2) else shards)
    state = config.precision_for(strategy).bytes("state")
    return optimizer_step_temp_bytes(config.optimizer, impl, local, 0.0, state)


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
