"""The flags of ``python -m experiments.plan``: its parser alone, which ``--help`` builds without
importing the simulator (:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse
import math

from experiments.common.frameworks.flags import FRAMEWORK_NAMES, add_from
from simcore.cliargs import (
    Parser,
    add_clock_levers,
    add_framework_levers,
    add_model,
    int_list,
    int_range,
    real_range,
)
from simcore.limits import MODEL_DIMENSION

__all__ = [
    "ENGINES",
    "ENGINE_PATHS",
    "FP8_RECIPES",
    "RING_KV",
    "RING_MERGES",
    "SEQUENCE_PARALLEL",
    "STRATEGIES",
    "build_parser",
]

# The allowed values as simcore defines them (kept literal so --help needs no heavy import;
# tests check they match simcore.planner.executors.ENGINES and simcore.fastpath.path.ENGINE_PATHS).
ENGINES = ("local", "ray")
ENGINE_PATHS = ("auto", "fast", "des")
STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3", "hsdp")
# simcore.compute.fp8.FP8_RECIPES, literal for the same reason (a test holds them equal)
FP8_RECIPES = ("none", "tensorwise", "rowwise", "delayed")
RING_KV = ("grouped", "repeated")  # simcore.parallel.cp.RING_KV, literal likewise
RING_MERGES = ("fused", "eager")  # simcore.parallel.cp.RING_MERGES, literal likewise
# --sequence-parallel: the settings tried where tp > 1.
SEQUENCE_PARALLEL = {"on": (True,), "off": (False,), "both": (False, True)}
DESCRIPTION = (
    "Plan a training run: the best ways to train a model on a cluster, at each GPU count you could rent."
)
_SUFFIXES = {
    "k": 1e3,
    "m": 1e6,
    "b": 1e9,
    "g": 1e9,
    "t": 1e12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


# Counts (tokens, samples) a plan takes: Llama 3 trained on 15.6e12 tokens (Dubey et al. 2024), so
# 1e18 is five orders of magnitude beyond any run, yet far from where float products overflow.
MAX_COUNT = 1e18
# Price of one GPU-hour: on-demand H100s cost a few dollars; 1e6 per hour is far above any price
# and keeps a run's cost finite (inf and 1e308 printed $inf).
MAX_PRICE_PER_GPU_HOUR = 1e6
MAX_DEGREE = 1 << 16  # a parallel degree: no axis exceeds the 65,536 GPUs of the largest cluster
MAX_WORKERS = 4096  # processes: far above the cores of one machine
# simcore.planner.space.MAX_MICRO_BATCH, literal so --help imports no planner (a test holds them equal)
MAX_MICRO_BATCH = 1 << 16


def _count(text: str) -> float:
    """A count such as ``2T``, ``300B``, ``1.5e12``, ``4M`` (decimal K, M, B/G, T) or ``4Mi`` (binary)."""
    value = text.strip().lower().replace("_", "")
    suffix = value[-2:] if value[-2:] in _SUFFIXES else value[-1:] if value[-1:] in _SUFFIXES else ""
    scale = _SUFFIXES.get(suffix, 1.0)
    value = value[: len(value) - len(suffix)]
    try:
        number = float(value) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count (e.g. 2T, 300B, 4M, 4Mi, 1.5e12)"
        ) from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite count")
    if not number >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    if number > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} is more than the {MAX_COUNT:.0e} allowed")
    return number


def _positive_int(text: str) -> int:
    try:
        value = int(_count(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number") from None
    if value != _count(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return value


def _add_space_arguments(p: argparse.ArgumentParser) -> None:
    """The search-space flags: strategies, micro-batches, memory levers, schedules, degrees."""
    space = p.add_argument_group("search space")
    space.add_argument("--strategies", default=",".join(STRATEGIES), help="comma list (default %(default)s)")
    space.add_argument(
        "--pipeline-strategies",
        default="ddp,zero1",
        help="strategies searched with pipeline parallelism (default %(default)s, as DeepSpeed and Megatron-Core)",
    )
    space.add_argument(
        "--micro-batches",
        help="comma list of micro-batch sizes (default: every divisor of the per-replica batch)",
    )
    space.add_argument(
        "--max-micro-batch", type=int_range(1, MAX_MICRO_BATCH),
        help="largest micro-batch tried (default 32 samples, at most 16k tokens)",
    )  # fmt: skip
    space.add_argument(
        "--recompute",
        default="none,selective,full",
        help="comma list of none, selective (Megatron: attention core), selective-op (torchtitan's per-op "
        "policy), full, every-K; or both (none,full), on, off (default %(default)s)",
    )
    space.add_argument(
        "--offload",
        default="none,optimizer,params,activations",
        help="offload modes, tried where a layout fits neither as is nor with full recompute (default %(default)s)",
    )
    space.add_argument(
        "--schedules",
        default="1f1b,zb-h1",
        help="pipeline schedules: 1f1b (interleaved with vpp > 1), zb-h1, gpipe (default %(default)s)",
    )
    space.add_argument(
        "--sequence-parallel",
        default="on",
        choices=list(SEQUENCE_PARALLEL),
        help="sequence parallelism with tp > 1 (default %(default)s)",
    )
    space.add_argument(
        "--tp-comm-overlap", action="store_true",
        help="overlap the sequence-parallel all-gather / reduce-scatter with the GEMMs (Megatron-LM "
        "--tp-comm-overlap, torch async TP) wherever sequence parallelism runs",
    )  # fmt: skip
    space.add_argument(
        "--ring-merge", default="fused", choices=list(RING_MERGES),
        help="with cp > 1, ring attention's per-step merge: fused (Transformer Engine's correction "
        "kernel, Megatron) or eager (torch context_parallel's unfused fp32 chain, torchtitan) "
        "(default %(default)s)",
    )  # fmt: skip
    space.add_argument(
        "--ring-kv", default="grouped", choices=list(RING_KV),
        help="with cp > 1, the key/value heads ring attention moves: grouped (the model's kv heads, "
        "Transformer Engine, Megatron) or repeated (expanded to the query heads, torchtitan's llama) "
        "(default %(default)s)",
    )  # fmt: skip
    for axis, what, default in (
        ("tp", "tensor-parallel", "GPUs per node"),
        ("pp", "pipeline-parallel", "blocks, at most 16"),
        ("cp", "context-parallel", "1; 8 from 16k tokens"),
        ("ep", "expert-parallel", "experts of a MoE model, else 1"),
        ("vpp", "virtual pipeline", "4"),
    ):
        space.add_argument(
            f"--max-{axis}", type=int_range(1, MAX_DEGREE), help=f"largest {what} degree (default: {default})"
        )
        space.add_argument(
            f"--{axis}", type=int_list(1, MAX_DEGREE), help=f"comma list: only these {what} degrees"
        )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.plan", description=DESCRIPTION)
    add_model(p, "gpt2-xl")
    p.add_argument("--cluster", default="dgx-a100", help="cluster preset or YAML (default %(default)s)")
    p.add_argument(
        "--gpus",
        default="8..64",
        help="GPU counts: 64,128 | 64..1024 | 64:1024:x2 | 64:1024:64 (default %(default)s)",
    )
    batch = p.add_argument_group("batch and model")
    batch.add_argument("--global-batch", type=_positive_int, help="samples per optimizer step")
    batch.add_argument("--tokens-per-step", type=_positive_int, help="tokens per optimizer step (e.g. 4Mi)")
    batch.add_argument(
        "--seq-len", type=int_range(1, MODEL_DIMENSION.limit), help="sequence length (default: the model's)"
    )
    batch.add_argument(
        "--dtype",
        default="bf16",
        help="compute dtype: fp32, bf16, fp16, fp8 (= --fp8 delayed) (default %(default)s)",
    )
    batch.add_argument(
        "--fp8", default="none", choices=list(FP8_RECIPES),
        help="FP8 linears: tensorwise / rowwise (torchao), delayed (Transformer Engine; what --dtype fp8 "
        "means); the output head stays bf16 (default %(default)s)",
    )  # fmt: skip
    batch.add_argument(
        "--optimizer", default="adamw", help="sgd, sgd-momentum, adam, adamw (default %(default)s)"
    )
    batch.add_argument(
        "--no-master-weights", action="store_true", help="pure bf16/fp16 (no fp32 master copy)"
    )
    batch.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile: fused norm/rotary/SwiGLU/loss kernels (default eager)",
    )
    add_clock_levers(batch)
    add_framework_levers(batch)
    _add_space_arguments(p)
    limits = p.add_argument_group("memory, time and cost")
    limits.add_argument(
        "--memory-headroom",
        default="0",
        help="memory kept free per GPU: a fraction (10%%, 0.1) or bytes (4GiB)",
    )
    limits.add_argument(
        "--price-per-gpu-hour",
        type=real_range(1e-6, MAX_PRICE_PER_GPU_HOUR, unit="per GPU-hour"),
        help="price of one GPU-hour, for cost per token and --max-cost",
    )
    limits.add_argument("--train-tokens", type=_count, help="length of the training run in tokens (e.g. 2T)")
    limits.add_argument("--train-samples", type=_count, help="length of the training run in samples")
    limits.add_argument(
        "--max-hours",
        type=real_range(1e-6, 1e9, unit="hours"),
        help="drop layouts whose run takes longer (needs --train-tokens/-samples)",
    )
    limits.add_argument(
        "--max-cost",
        type=real_range(1e-6, MAX_COUNT, unit="currency units"),
        help="drop layouts whose run costs more (needs a price and a length)",
    )
    run = p.add_argument_group("how to run")
    run.add_argument(
        "--engine",
        default="local",
        help=f"{' or '.join(ENGINES)}: a process pool here, or Ray tasks (default %(default)s)",
    )
    run.add_argument(
        "--address",
        help="Ray cluster address (host:port, ray://host:port or auto); default: a local instance",
    )
    run.add_argument("--workers", type=int_range(1, MAX_WORKERS), help="processes (default: every core)")
    run.add_argument(
        "--engine-path",
        default="auto",
        help=f"{', '.join(ENGINE_PATHS)}: fast analytical path where ranks are alike (default %(default)s)",
    )
    run.add_argument("--calibration", help="calibration profile JSON (calibrate.fit)")
    out = p.add_argument_group("output")
    out.add_argument(
        "--top",
        type=int_range(1, 10_000),
        default=5,
        help="layouts listed per GPU count (default %(default)s)",
    )
    out.add_argument("--format", default="table", choices=["table", "json", "csv"], help="output format")
    out.add_argument(
        "--out", help="directory for the Pareto plot and plan.json (must be empty unless --force)"
    )
    out.add_argument("--force", action="store_true", help="write into a non-empty --out")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    out.add_argument(
        "--exhaustive", action="store_true",
        help="time every candidate; by default one whose lower bound on the step is above the --top "
        "layouts already timed is skipped (the listed layouts are the same)",
    )  # fmt: skip
    out.add_argument(
        "--count", action="store_true", help="print how many layouts each GPU count would time, and stop"
    )
    out.add_argument(
        "--emit", choices=list(FRAMEWORK_NAMES),
        help="print each GPU count's best layout as that framework's config instead of the table",
    )  # fmt: skip
    add_from(p)
    return p
