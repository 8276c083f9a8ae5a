"""The memory floor: a hand count of each term, and a true lower bound of the simulated peak."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.memory import runtime_memory
from simcore.parallel.layout import ParallelLayout
from simcore.parallel.options import ParallelOptions
from simcore.planner.evaluate import PlanJob, evaluate_tasks
from simcore.planner.floor import activation_floor_per_sample, memory_floor_bytes
from simcore.planner.space import PlanLayout, SearchSpace, layouts_for, search_axes
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from topologies import load_cluster

GPT2 = load_workload("gpt2-small")
CONFIG = TrainingConfig(global_batch=64, seq_len=1024, allocator_overhead_bytes=0)


def _bytes(config: TrainingConfig) -> tuple[int, int, int]:
    """DDP's bytes per parameter with bf16 and fp32 master weights: fp32 parameters and gradients,
    AdamW's two fp32 moments."""
    assert config.dtype == "bf16" and config.master_weights and config.optimizer == "adamw"
    return 4, 4, 8


# DDP's optimizer step on a GPU: its bucket copies of the fp32 gradients (4 bytes a parameter,
# gradient_as_bucket_view=False) and torch's foreach AdamW scratch (one fp32 copy of every local
# parameter, 4 bytes) beside the parameters, gradients and state.
DDP_BUFFERS, FOREACH_SCRATCH = 4, 4


def test_model_states_are_split_by_tp_pp_and_sharded_over_dp_cp() -> None:
    p, g, o = _bytes(CONFIG)
    full = PlanLayout("ddp", 1, ParallelLayout(tp=2, pp=2), ParallelOptions(recompute="full"))
    # 16 GPUs, tp 2 x pp 2: a GPU holds a quarter of the parameters, DDP keeps all three states,
    # its bucket copies and the foreach scratch at the optimizer step
    assert memory_floor_bytes(GPT2, CONFIG, full, 16, 8) == pytest.approx(
        GPT2.params / 4 * (p + g + o + DDP_BUFFERS + FOREACH_SCRATCH)
    )
    # ZeRO keeps bf16 working parameters and gradients (2 + 2 bytes), the fp32 master copy and the
    # two moments (4 + 8) in the optimizer state: ZeRO-1 on 8 GPUs shards only the 12 bytes; its
    # reduction bucket holds min(params, 5e8) bf16 gradients (GPT-2 small: the whole model);
    # DeepSpeed's fused Adam needs no scratch
    zero1 = PlanLayout("zero1", 1, options=ParallelOptions(recompute="full"))
    assert GPT2.params < 500_000_000
    assert memory_floor_bytes(GPT2, CONFIG, zero1, 8, 8) == pytest.approx(GPT2.params * (2 + 2 + 12 / 8 + 2))
    zero3 = replace(full, strategy="zero3", parallel=ParallelLayout(tp=2, cp=2))
    # zero3 shards every state (2 + 2 + 12 bytes) over dp x cp = 4 x 2 = 8 ranks, no bucket, fused Adam
    assert memory_floor_bytes(GPT2, CONFIG, zero3, 16, 8) == pytest.approx(GPT2.params / 2 / 8 * 16)
    hsdp = replace(zero3, strategy="hsdp", parallel=ParallelLayout(tp=2))
    # hsdp on 32 GPUs, tp 2: dp 16 but shards within a node: at most 8 ranks; FSDP2 keeps bf16
    # parameters and gradients, the fp32 master and moments (2 + 2 + 12), and torch's foreach
    # AdamW copies its local fp32 shard (4)
    assert memory_floor_bytes(GPT2, CONFIG, hsdp, 32, 8) == pytest.approx(
        GPT2.params / 2 / 8 * (2 + 2 + 12 + FOREACH_SCRATCH)
    )


def test_runtime_overhead_and_fragmentation_are_charged() -> None:
    """Every plan starts from the CUDA context and one communicator's NCCL buffers (data file), and
    the allocator's fragmentation is charged on the tensors (7% on GPUs); none on CPUs."""
    table = runtime_memory("gpu")
    overhead = table.cuda_context_bytes + table.nccl_bytes_per_channel_peer * table.nccl_channels * 2
    assert table.nccl_peers == 2 and table.fragmentation == pytest.approx(0.07)
    config = replace(CONFIG, allocator_overhead_bytes=None)
    zero3 = PlanLayout("zero3", 1, options=ParallelOptions(recompute="full"))
    tensors = GPT2.params / 8 * 16
    assert memory_floor_bytes(GPT2, config, zero3, 8, 8) == pytest.approx(tensors * 1.07 + overhead)
    assert memory_floor_bytes(GPT2, config, zero3, 8, 8, device_kind="cpu") == pytest.approx(
        # the CPU's single-tensor Adam scratch is of the largest tensor: not counted
        tensors
    )
    fixed = replace(CONFIG, allocator_overhead_bytes=123)  # a given overhead: no fragmentation
    assert memory_floor_bytes(GPT2, fixed, zero3, 8, 8) == pytest.approx(tensors + 123)


def test_ddp_bucket_view_and_fused_optimizer_drop_their_bytes() -> None:
    p, g, o = _bytes(CONFIG)
    full = PlanLayout("ddp", 1, options=ParallelOptions(recompute="full"))
    view = replace(CONFIG, gradient_as_bucket_view=True)
    assert memory_floor_bytes(GPT2, view, full, 8, 8) == pytest.approx(GPT2.params * (p + g + o + 4))
    fused = replace(view, optimizer_impl="fused")
    assert memory_floor_bytes(GPT2, fused, full, 8, 8) == pytest.approx(GPT2.params * (p + g + o))
    # ZeRO-1's bucket is capped at reduce_bucket_size elements
    small = replace(CONFIG, zero_bucket_elements=1000)
    zero1 = PlanLayout("zero1", 1, options=ParallelOptions(recompute="full"))
    assert memory_floor_bytes(GPT2, small, zero1, 8, 8) == pytest.approx(
        GPT2.params * (2 + 2 + 12 / 8) + 2000
    )
    # one GPU: nothing to reduce, no bucket
    assert memory_floor_bytes(GPT2, CONFIG, zero1, 1, 8) == pytest.approx(GPT2.params * (2 + 2 + 12))


def test_offload_removes_what_it_moves() -> None:
    p, g, o = _bytes(CONFIG)
    base = PlanLayout("ddp", 1, options=ParallelOptions(recompute="full", offload="optimizer"))
    # the bucket copies and the optimizer step's scratch stay on the device
    extra = DDP_BUFFERS + FOREACH_SCRATCH
    assert memory_floor_bytes(GPT2, CONFIG, base, 8, 8) == pytest.approx(GPT2.params * (p + g + extra))
    params = replace(base, options=replace(base.options, offload="params"))
    assert memory_floor_bytes(GPT2, CONFIG, params, 8, 8) == pytest.approx(GPT2.params * extra)
    acts = PlanLayout("ddp", 2, options=ParallelOptions(offload="activations"))
    assert memory_floor_bytes(GPT2, CONFIG, acts, 8, 8) == pytest.approx(GPT2.params * (p + g + o + extra))


def test_activations_of_the_first_stage_in_flight() -> None:
    layers = GPT2.layers
    every = sum(layer.activation_bytes for layer in layers)
    assert activation_floor_per_sample(GPT2, PlanLayout("ddp", 1)) == every
    blocks = sum(layer.activation_bytes for layer in layers if layer.block >= 0)
    embed = sum(layer.activation_bytes for layer in layers[:1])  # GPT-2: the embedding, then block 0
    cores = sum(layer.activation_bytes for layer in layers if layer.name.endswith("attn_core"))
    piped = PlanLayout("zero1", 2, ParallelLayout(tp=2, pp=4))
    assert activation_floor_per_sample(GPT2, piped) == pytest.approx((embed + blocks / 4) / 2)
    selective = replace(piped, options=ParallelOptions(recompute="selective"))
    assert activation_floor_per_sample(GPT2, selective) == pytest.approx((embed + (blocks - cores) / 4) / 2)
    assert (
        activation_floor_per_sample(GPT2, replace(piped, options=ParallelOptions(recompute="every-2"))) == 0.0
    )
    # 16 GPUs, tp 2 x pp 4: dp 2, 64 samples -> 16 micro-batches of 2; 1F1B keeps pp = 4 in flight;
    # ZeRO-1 over dp 2: bf16 parameters (2 bytes), 12 / 2 bytes of state, the bf16 bucket (2 bytes)
    states = GPT2.params / 8
    one = (embed + blocks / 4) / 2 * 2
    assert memory_floor_bytes(GPT2, CONFIG, piped, 16, 8) == pytest.approx(states * (2 + 6 + 2) + 4 * one)
    gpipe = replace(piped, options=ParallelOptions(schedule="gpipe"))
    assert memory_floor_bytes(GPT2, CONFIG, gpipe, 16, 8) == pytest.approx(states * (2 + 6 + 2) + 16 * one)


@settings(max_examples=40, deadline=None)
@given(
    strategy=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"]),
    degrees=st.sampled_from([(2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 2, 2), (2, 1, 2), (4, 2, 1)]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    schedule=st.sampled_from(["1f1b", "zb-h1", "gpipe"]),
    micro_batch=st.sampled_from([1, 2]),
    offload=st.sampled_from(["none", "optimizer", "params", "activations"]),
    interleave=st.booleans(),
)
def test_the_floor_never_exceeds_the_parallel_peak(
    strategy: str,
    degrees: tuple[int, int, int],
    recompute: str,
    schedule: str,
    micro_batch: int,
    offload: str,
    interleave: bool,
) -> None:
    """Candidates are skipped on the floor alone: it must bound the composed step's peak from below."""
    tp, pp, cp = degrees
    vpp = 2 if interleave and pp > 1 and schedule == "1f1b" else 1
    parallel = ParallelLayout(tp=tp, pp=pp, cp=cp, vpp=vpp)
    options = ParallelOptions(
        schedule=schedule, sequence_parallel=tp > 1, recompute=recompute, offload=offload
    )
    layout = PlanLayout(strategy, micro_batch, parallel, options)
    config = TrainingConfig(global_batch=32 * micro_batch, seq_len=1024)
    job = PlanJob(GPT2, "dgx-a100", load_cluster, config, key="floor-parallel")
    (outcome,) = evaluate_tasks(job, [(16, layout)])
    assert outcome.report is not None, outcome.error
    floor = memory_floor_bytes(GPT2, replace(config, micro_batch=micro_batch), layout, 16, node_size=8)
    assert floor <= outcome.report.peak_memory_bytes * (1 + 1e-12)


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from(["gpt2-small", "bert-base", "resnet50-cifar10"]),
    strategy=st.sampled_from(["ddp", "fsdp", "zero1", "zero2", "zero3", "hsdp"]),
    gpus=st.sampled_from([1, 8, 16]),
    micro_batch=st.sampled_from([1, 4]),
    recompute=st.sampled_from(["none", "full"]),
    accumulation=st.integers(1, 3),
)
def test_the_floor_never_exceeds_the_data_parallel_peak(
    model: str, strategy: str, gpus: int, micro_batch: int, recompute: str, accumulation: int
) -> None:
    workload = load_workload(model)
    config = TrainingConfig(
        global_batch=gpus * micro_batch * accumulation, seq_len=workload.tokens_per_sample or None
    )
    layout = PlanLayout(strategy, micro_batch, options=ParallelOptions(recompute=recompute))
    job = PlanJob(workload, "dgx-a100", load_cluster, config, key=f"floor-{model}-{gpus}")
    (outcome,) = evaluate_tasks(job, [(gpus, layout)])
    assert outcome.report is not None, outcome.error
    floor = memory_floor_bytes(workload, replace(config, micro_batch=micro_batch), layout, gpus, node_size=8)
    assert floor <= outcome.report.peak_memory_bytes * (1 + 1e-12)


@pytest.mark.parametrize(
    "layout",
    [
        PlanLayout("fsdp", 1, ParallelLayout(ep=8), ParallelOptions(recompute="full")),
        PlanLayout("zero1", 1, ParallelLayout(tp=2, ep=2), ParallelOptions(sequence_parallel=True)),
        PlanLayout("ddp", 1, ParallelLayout(pp=2, ep=4), ParallelOptions(recompute="selective")),
    ],
)
def test_the_floor_bounds_a_mixture_of_experts_peak(layout: PlanLayout) -> None:
    """Routed experts are split over tp x ep, the rest over tp: the floor divides all by tp x pp x ep."""
    workload = load_workload("mixtral-8x7b", seq_len=1024)
    config = TrainingConfig(global_batch=16, seq_len=1024)
    job = PlanJob(workload, "hgx-h100", load_cluster, config, key="floor-moe")
    (outcome,) = evaluate_tasks(job, [(8, layout)])
    assert outcome.report is not None, outcome.error
    floor = memory_floor_bytes(workload, replace(config, micro_batch=1), layout, 8, node_size=8)
    assert 0 < floor <= outcome.report.peak_memory_bytes


def test_what_the_floor_prunes_the_timed_path_calls_out_of_memory() -> None:
    """Every candidate (and offload variant) of a real search whose floor is above a memory
    limit peaks above it when timed: pruning on the floor drops no layout that would fit."""
    workload = load_workload("gpt2-medium", seq_len=1024)
    config = TrainingConfig(global_batch=64, seq_len=1024)
    space = SearchSpace(strategies=("ddp", "zero1", "zero2", "fsdp", "hsdp"), max_micro_batch=4)
    axes = search_axes(space, workload, 8)
    layouts, _ = layouts_for(space, axes, workload, 16, config.global_batch, 8)
    candidates = [
        replace(layout, options=replace(layout.options, offload=mode))
        for layout in layouts
        for mode in ("none", "optimizer", "params")
    ]
    floors = [
        memory_floor_bytes(workload, replace(config, micro_batch=c.micro_batch), c, 16, 8) for c in candidates
    ]
    limit = sorted(floors)[len(floors) // 2]  # half of them pruned
    pruned = [c for c, f in zip(candidates, floors, strict=True) if f > limit][::7]
    assert len(pruned) >= 10
    job = PlanJob(workload, "dgx-a100", load_cluster, config, key="floor-prunes")
    for outcome in evaluate_tasks(job, [(16, c) for c in pruned]):
        assert outcome.report is not None, outcome.error
        assert outcome.report.peak_memory_bytes > limit, outcome.layout.label(16)
