"""The flags of ``python -m experiments.what_if``: its parser alone, which ``--help`` builds without
importing the simulator (:func:`experiments.console.run_module`); :mod:`experiments.what_if.cli`
parses with it and runs."""

from __future__ import annotations

import argparse

from experiments.common.args import add_batch, add_strategies
from experiments.common.frameworks.flags import add_from
from simcore.cliargs import (
    Parser,
    add_clock_levers,
    add_format,
    add_framework_levers,
    add_model,
    add_out,
    add_quiet,
    int_range,
    real_range,
    size_bytes,
)
from simcore.whatif.defaults import (
    DEFAULT_CLUSTERS,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_MICRO_BATCH,
    DEFAULT_MODEL,
    DEFAULT_SEQ_LEN,
)
from topologies.cliargs import MAX_GPUS, add_cluster, add_gpus, add_network

__all__ = ["MAX_STEPS", "PARALLEL_FLAGS", "STOCHASTIC_STEPS", "build_parser"]

DESCRIPTION = "The main job: which data-parallel strategy for this model on these clusters, and why."

# simcore's allowed values and TrainingConfig's defaults, literal so that --help imports neither the
# step model, the parallel layouts nor the parameter server (tests/experiments/what_if/
# test_what_if_args.py holds each equal to its source, named beside it).
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")  # simcore.strategies.base.COMPUTE_DTYPES
FP8_RECIPES = ("none", "tensorwise", "rowwise", "delayed")  # simcore.compute.fp8.FP8_RECIPES
OPTIMIZER_IMPLS = ("auto", "foreach", "fused", "single")  # simcore.compute.optimizer.OPTIMIZER_IMPLS
# simcore.compute.precision.PRECISION_MODES
PRECISION_MODES = ("auto", "fp32", "tf32", "amp", "amp-compress", "pure", "fsdp-mp", "fsdp-mp-low", "mixed")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")  # simcore.strategies.base.OPTIMIZERS
JITTER_SCOPES = ("step", "sync")  # simcore.strategies.base.JITTER_SCOPES
CP_KINDS = ("ring", "ulysses")  # simcore.parallel.CP_KINDS
RING_MERGES = ("fused", "eager")  # simcore.parallel.cp.RING_MERGES
RING_KV = ("grouped", "repeated")  # simcore.parallel.cp.RING_KV
OFFLOAD_MODES = ("none", "optimizer", "params", "activations")  # simcore.parallel.OFFLOAD_MODES
PIPELINE_SCHEDULES = ("1f1b", "gpipe", "zb-h1")  # simcore.parallel.PIPELINE_SCHEDULES
DEFAULT_STALENESS_BOUND = 3  # simcore.paramserver.DEFAULT_STALENESS_BOUND
# simcore.whatif.sweep.DEFAULT_CONFIG's fields
DEFAULT_DTYPE = "bf16"
DEFAULT_PRECISION = "auto"
DEFAULT_OPTIMIZER = "adamw"
DEFAULT_OPTIMIZER_IMPL = "auto"
DEFAULT_BUCKET_SIZE_BYTES = 25 * 2**20
DEFAULT_PREFETCH = 1
DEFAULT_STEPS = 1
DEFAULT_JITTER_SCOPE = "step"

STOCHASTIC_STEPS = (
    20  # steps simulated with jitter when --steps is not given: enough for a p99 to mean something
)
MAX_STEPS = 10_000


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.what_if", description=DESCRIPTION)
    add_model(p, DEFAULT_MODEL)
    add_cluster(p, ",".join(DEFAULT_CLUSTERS), several=True)
    add_network(p)
    add_strategies(p, None)
    add_gpus(p, "16", several=True, help="a GPU count or a comma list (a scaling sweep)")
    add_batch(p, global_batch=DEFAULT_GLOBAL_BATCH, micro_batch=DEFAULT_MICRO_BATCH)
    p.add_argument(
        "--batch-per-gpu", type=int_range(1, 2**20), default=None,
        help="weak scaling: samples per GPU per step (global batch = N x GPUs), so --gpus 1,8,64 "
        "runs in one command; replaces --global-batch",
    )  # fmt: skip
    p.add_argument(
        "--seq-len", type=int_range(1, 2**20), default=None,
        help=f"sequence length (default: the model's own: a preset's or a shape file's; {DEFAULT_SEQ_LEN} for GPT-2)",
    )  # fmt: skip
    p.add_argument(
        "--dtype", default=DEFAULT_DTYPE, choices=list(COMPUTE_DTYPES),
        help="matmul dtype (tf32: fp32 with TF32 matmuls; fp8: FP8 GEMMs where the device has them)",
    )  # fmt: skip
    p.add_argument(
        "--fp8", default="none", choices=list(FP8_RECIPES),
        help="FP8 linears (the blocks' linears; the output head stays bf16): tensorwise / rowwise (torchao "
        "float8, torchtitan), delayed (Transformer Engine DelayedScaling, Megatron-LM; what --dtype fp8 means)",
    )  # fmt: skip
    p.add_argument(
        "--precision", default=DEFAULT_PRECISION, choices=list(PRECISION_MODES),
        help="how tensors and collectives are typed: amp (autocast, fp32 params/grads/all-reduce), "
        "amp-compress (DDP bf16 compression hook), pure, fsdp-mp / fsdp-mp-low (FSDP "
        "MixedPrecisionPolicy, reduce fp32 / low), mixed (Megatron/DeepSpeed fp32 master); auto: what "
        "each framework runs (DDP amp, FSDP fsdp-mp, ZeRO mixed)",
    )  # fmt: skip
    p.add_argument("--no-master-weights", action="store_true", help="pure bf16/fp16 (no fp32 master copy)")
    p.add_argument("--optimizer", default=DEFAULT_OPTIMIZER, choices=list(OPTIMIZERS), help="optimizer")
    p.add_argument(
        "--optimizer-impl", default=DEFAULT_OPTIMIZER_IMPL, choices=[*OPTIMIZER_IMPLS, "single-tensor"],
        help="torch.optim implementation: foreach (GPU default, ~80 B/param for AdamW), fused (~28 "
        "B/param), single (per-tensor loop, CPU default); auto: the framework's default (DeepSpeed: fused)",
    )  # fmt: skip
    p.add_argument(
        "--bucket-size", type=size_bytes(allow_zero=False, high=2**40), default=f"{DEFAULT_BUCKET_SIZE_BYTES / 2**20:g}MiB",
        help="DDP/ZeRO gradient bucket",
    )  # fmt: skip
    p.add_argument(
        "--prefetch", type=int_range(0, 1024), default=DEFAULT_PREFETCH, help="FSDP prefetch depth in units"
    )
    p.add_argument(
        "--wrap", default="per-block", help="FSDP wrap: per-block, every-N-layers, every-N-blocks, or indices"
    )
    p.add_argument("--no-reshard-after-forward", action="store_true", help="FSDP keeps gathered parameters")
    p.add_argument("--checkpoint-activations", action="store_true", help="recompute activations in backward")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile: fused norm/rotary/SwiGLU/loss kernels (default eager)",
    )
    p.add_argument(
        "--software-era",
        default="current",
        help="convolution library era: current, or cudnn-v3 for 2015 stacks (no Winograd); default %(default)s",
    )
    add_clock_levers(p, rank_spread_note="; off with --straggler or --jitter, which give per-rank speeds")
    add_framework_levers(p)
    p.add_argument(
        "--steps",
        type=int_range(1, MAX_STEPS),
        help=f"steps to simulate for p50/p99 (default {DEFAULT_STEPS}, {STOCHASTIC_STEPS} with --jitter; "
        "parameter servers at least 2, 8 on uneven hardware)",
    )
    p.add_argument(
        "--staleness-bound",
        type=int_range(0, 1000),
        default=DEFAULT_STALENESS_BOUND,
        help="ps-ssp's bound s and ps-mitigated's threshold, in versions",
    )
    p.add_argument(
        "--ps-shards", type=int_range(1, MAX_GPUS),
        help="server shards (default: one per worker node when colocated)",
    )  # fmt: skip
    p.add_argument(
        "--ps-placement",
        default="colocated",
        help="colocated (beside the workers), dedicated or dedicated:N (N extra server nodes)",
    )
    p.add_argument(
        "--straggler",
        action="append",
        default=[],
        metavar="RANK:FACTOR",
        help="rank RANK computes FACTOR times slower (repeatable)",
    )
    p.add_argument(
        "--jitter",
        help="seeded jitter, e.g. compute=lognormal:0.1,link=lognormal:0.05: each rank's compute is "
        "multiplied by a lognormal(0, sigma) draw (median 1; sigma = log(p84/p50) of one rank's "
        "compute times), when --jitter-scope says",
    )
    p.add_argument(
        "--jitter-scope",
        default=DEFAULT_JITTER_SCOPE,
        choices=list(JITTER_SCOPES),
        help="step: one draw per rank per step, the slowest rank gating the step once; sync: one "
        "draw per rank per synchronisation point (each wait on a collective), the slowest gating "
        "each interval (FSDP, waiting per unit, pays it per unit)",
    )
    p.add_argument("--seed", type=int_range(0, 2**32 - 1), default=0, help="seed of the jitter draws")
    p.add_argument("--calibration", help="calibration profile JSON (calibrate.fit)")
    add_format(p, ("table", "json", "csv"))
    add_out(p, "plots and a Chrome trace", default_new=False)
    add_quiet(p)
    _add_parallel_flags(p)
    add_from(p)
    return p


def _add_parallel_flags(p: argparse.ArgumentParser) -> None:
    """Model-parallel layouts (simcore.parallel): any of these runs the what-if over layouts."""
    g = p.add_argument_group("parallel layout (tensor, pipeline, context, expert parallelism)")
    for flag, what in (("tp", "tensor"), ("pp", "pipeline"), ("cp", "context"), ("ep", "expert")):
        g.add_argument(f"--{flag}", help=f"{what}-parallel degree, or a comma list (a layout sweep)")
    g.add_argument("--vpp", help="virtual pipeline stages per rank (interleaved 1F1B), or a comma list")
    g.add_argument(
        "--pp-layers",
        help="uneven pipeline stages: blocks per (virtual) stage, e.g. 15,16,16,15 (must sum to the "
        "model's layers), or Megatron's first:F,last:L (the rest split evenly); one --pp value",
    )
    g.add_argument(
        "--recompute",
        help="none, selective (Megatron: the attention core), selective-op (torchtitan's per-op policy: "
        "matmul outputs but every second, attention and reduce-scatters saved), full or every-K",
    )
    g.add_argument(
        "--offload", choices=list(OFFLOAD_MODES), help="CPU offload of optimizer state, params or activations"
    )
    g.add_argument("--schedule", choices=list(PIPELINE_SCHEDULES), help="pipeline schedule (default 1f1b)")
    g.add_argument(
        "--sequence-parallel", action="store_true", default=None, help="Megatron sequence parallelism"
    )
    g.add_argument(
        "--tp-comm-overlap", action="store_true", default=None,
        help="overlap sequence parallelism's all-gather / reduce-scatter with the GEMMs (Megatron-LM "
        "--tp-comm-overlap, torch async TP); needs --sequence-parallel",
    )  # fmt: skip
    g.add_argument("--cp-kind", choices=list(CP_KINDS), help="context parallelism: ring attention or Ulysses")
    g.add_argument(
        "--ring-merge", choices=list(RING_MERGES),
        help="ring attention's per-step output merge: fused (Transformer Engine, Megatron; default) or "
        "eager (torch context_parallel, torchtitan)",
    )  # fmt: skip
    g.add_argument(
        "--ring-kv", choices=list(RING_KV),
        help="the key/value heads ring attention moves: grouped (the model's kv heads, Transformer "
        "Engine, Megatron; default) or repeated (expanded to the query heads, torchtitan's llama)",
    )  # fmt: skip
    g.add_argument(
        "--expert-load",
        type=real_range(1.0, MAX_EXPERT_LOAD),
        help="MoE: tokens on the busiest expert rank / the mean (>= 1)",
    )
    g.add_argument(
        "--capacity-factor",
        type=real_range(MIN_CAPACITY_FACTOR, MAX_CAPACITY_FACTOR),
        help="MoE: expert capacity / mean tokens (default dropless)",
    )


# MoE imbalance: all of a batch's tokens on one of 1,024 expert ranks is a load of 1,024 (the most
# experts of a published model, e.g. 256 routed experts in DeepSeek-V3, are far fewer).
MAX_EXPERT_LOAD = 1024.0
# Capacity factors: Switch Transformer (Fedus et al. 2021, Table 1) trains at 1.0-2.0; below 0.1
# nine tenths of the tokens would be dropped, and above 64 no expert ever drops one.
MIN_CAPACITY_FACTOR, MAX_CAPACITY_FACTOR = 0.1, 64.0


PARALLEL_FLAGS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "pp_layers",
    "recompute",
    "offload",
    "schedule",
    "sequence_parallel",
    "tp_comm_overlap",
    "cp_kind",
    "ring_merge",
    "ring_kv",
    "expert_load",
    "capacity_factor",
)
