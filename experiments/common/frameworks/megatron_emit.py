"""``plan --emit megatron``: a plan's layout as a Megatron-LM argument line (arguments as
:mod:`experiments.common.frameworks.megatron` reads them back)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.common.frameworks.levers import Emitted, plan_levers, zero_bucket_notes
from simcore.compute.fp8 import resolve_fp8

__all__ = ["emit_megatron"]


def emit_megatron(layout: Mapping[str, Any], run: Mapping[str, Any]) -> Emitted | None:
    """The Megatron-LM arguments of a plan's layout (``layout`` as in the plan's JSON record, ``run``
    the model's shape mapping or preset, the batch and the run's levers, as
    :func:`experiments.common.frameworks.emit.run_levers` has them), or None when Megatron cannot run
    it; levers it runs differently are named in the result's ``cannot``."""
    strategy = {"ddp": [], "zero1": ["--use-distributed-optimizer"], "fsdp": ["--use-torch-fsdp2"]}.get(
        layout["strategy"]
    )
    offload = {"none": [], "optimizer": ["--optimizer-cpu-offload"], "activations": ["--cpu-offloading"]}.get(
        layout["offload"]
    )
    recompute = {"none": [], "selective": ["--recompute-granularity", "selective"],
                 "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                          "--recompute-num-layers", "1"]}.get(layout["recompute"])  # fmt: skip
    if strategy is None or offload is None or recompute is None:
        return None
    if layout["pp"] > 1 and layout["schedule"] != "1f1b":  # Megatron runs 1F1B (interleaved) only
        return None
    shape = run["shape"]
    parts = [*_shape_args(shape), "--seq-length", str(run["seq_len"]),
             "--micro-batch-size", str(layout["micro_batch"]), "--global-batch-size", str(run["global_batch"])]  # fmt: skip
    parts += ["--tensor-model-parallel-size", str(layout["tp"]), "--pipeline-model-parallel-size", str(layout["pp"]),
              "--context-parallel-size", str(layout["cp"]), "--expert-model-parallel-size", str(layout["ep"])]  # fmt: skip
    if layout["vpp"] > 1:
        if shape["layers"] % (layout["pp"] * layout["vpp"]):  # Megatron's virtual stages are whole layers
            return None
        parts += [
            "--num-layers-per-virtual-pipeline-stage",
            str(shape["layers"] // (layout["pp"] * layout["vpp"])),
        ]
    if layout["sequence_parallel"] and layout["tp"] > 1:
        parts.append("--sequence-parallel")
    if layout.get("tp_comm_overlap") and layout["tp"] > 1:
        parts.append("--tp-comm-overlap")
    if layout["cp"] > 1:
        parts += ["--cp-comm-type", "p2p"]  # ring attention (the plan's context parallelism)
    cannot: list[tuple[str, str]] = []
    if layout["cp"] > 1 and run.get("ring_merge", "fused") == "eager":
        cannot.append(("ring-merge", "eager: Transformer Engine's ring attention merges in a fused kernel"))
    if layout["cp"] > 1 and run.get("ring_kv", "grouped") == "repeated":
        cannot.append(("ring-kv", "repeated: Transformer Engine's ring attention moves the grouped kv heads"))
    parts += strategy + recompute + offload + _emit_precision(run, cannot)
    parts += _emit_kernels(run, cannot)
    optimizer = {"adamw": ["--optimizer", "adam"], "sgd-momentum": ["--optimizer", "sgd"]}.get(
        run["optimizer"]
    )
    if optimizer is None:
        cannot.append(("optimizer", f"{run['optimizer']}: Megatron runs adam (AdamW) or sgd (momentum 0.9)"))
    parts += optimizer or []
    _precision_note(layout, run, cannot)
    impl = plan_levers(layout, run)["optimizer-impl"]
    if impl != "fused":
        cannot.append(
            ("optimizer-impl", f"{impl}: Megatron's optimizers are fused (Apex / Transformer Engine)")
        )
    cannot += zero_bucket_notes(layout, run, "Megatron's distributed optimizer buckets by --ddp-bucket-size")
    return Emitted(shlex.join(parts), tuple(cannot))


# trainsim's FP8 recipe -> Megatron-LM's --fp8-recipe (arguments.py, _add_transformer_engine_args:
# delayed and tensorwise; --fp8-format hybrid is e4m3 forward, e5m2 gradients, as TE recommends)
FP8_RECIPES = {"delayed": "delayed", "tensorwise": "tensorwise"}


def _emit_precision(run: Mapping[str, Any], cannot: list[tuple[str, str]]) -> list[str]:
    dtype, fp8 = resolve_fp8(run["dtype"], run.get("fp8", "none"))
    low = "bf16" if dtype == "fp8" else dtype
    parts = {"bf16": ["--bf16"], "fp16": ["--fp16"]}.get(low, [])
    if low == "tf32":
        cannot.append(("dtype", "tf32: Megatron's fp32 run has no TF32 switch (it is the environment's)"))
    if fp8 in FP8_RECIPES:
        parts += ["--fp8-format", "hybrid", "--fp8-recipe", FP8_RECIPES[fp8]]
    elif fp8 != "none":
        cannot.append(("fp8", f"{fp8}: Megatron's recipes are delayed and tensorwise (Transformer Engine)"))
    return parts


def _emit_kernels(run: Mapping[str, Any], cannot: list[tuple[str, str]]) -> list[str]:
    saved = run.get("saved_tensors", "eager")
    fp8 = resolve_fp8(run["dtype"], run.get("fp8", "none"))[1] in FP8_RECIPES  # FP8 written: TE's
    impl = "transformer_engine" if saved == "megatron-te" or fp8 else "local"
    if saved == "eager" and fp8:
        cannot.append(
            ("saved-tensors", "eager: FP8 runs on Transformer Engine, whose fused kernels save less")
        )
    if run.get("cross_entropy", "torch") != "megatron":
        cannot.append(("cross-entropy", "torch: Megatron-Core's loss is its vocab-parallel cross entropy"))
    if run.get("compile"):
        cannot.append(("compile", "Megatron-LM does not run the model under torch.compile"))
    return ["--transformer-impl", impl]


def _precision_note(layout: Mapping[str, Any], run: Mapping[str, Any], cannot: list[tuple[str, str]]) -> None:
    """Megatron keeps low-precision parameters and gradients with fp32 main weights ("mixed") under
    every strategy; the plan's ``auto`` is torch's own mode for DDP and FSDP."""
    want = plan_levers(layout, run)["precision"]
    if want not in ("mixed", "fp32", "tf32"):
        cannot.append(
            ("precision", f"{want}: Megatron runs low-precision weights with fp32 main weights (mixed)")
        )


def _shape_args(shape: Mapping[str, Any]) -> Sequence[str]:
    parts = ["--num-layers", str(shape["layers"]), "--hidden-size", str(shape["hidden"]),
             "--ffn-hidden-size", str(shape["ffn"]), "--num-attention-heads", str(shape["heads"])]  # fmt: skip
    if shape.get("kv_heads"):
        parts += ["--group-query-attention", "--num-query-groups", str(shape["kv_heads"])]
    if shape.get("head_dim"):
        parts += ["--kv-channels", str(shape["head_dim"])]
    parts += ["--vocab-size", str(shape["vocab"])]
    if shape.get("max_positions"):
        parts += ["--max-position-embeddings", str(shape["max_positions"])]
    parts += ["--swiglu"] if shape.get("gated_ffn") else []
    parts += ["--normalization", "RMSNorm"] if shape.get("norm") == "rmsnorm" else []
    parts += ["--position-embedding-type", "rope"] if shape.get("positions") == "rotary" else []
    parts += ["--untie-embeddings-and-output-weights"] if shape.get("tied_embeddings") is False else []
    parts += ["--disable-bias-linear"] if shape.get("bias") is False else []
    if shape.get("dropout") is False:
        parts += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    moe = shape.get("moe")
    if moe:
        parts += ["--num-experts", str(moe["experts"]), "--moe-router-topk", str(moe["top_k"]),
                  "--moe-ffn-hidden-size", str(moe["expert_ffn"])]  # fmt: skip
        if moe.get("shared_experts"):
            parts += ["--moe-shared-expert-intermediate-size", str(moe["shared_experts"] * moe["expert_ffn"])]
    return parts
