"""Megatron-LM command lines in (``--from megatron "ARGS"``); out, ``plan --emit megatron``, is :mod:`.megatron_emit`.

Argument names and defaults are Megatron-LM's ``megatron/training/arguments.py`` at commit
67f3515c8a0539d38c23f59dd8b85efdcbb3af3d (the last before its arguments were generated from
``TransformerConfig``; the names did not change). The text may be the arguments alone, a whole
``torchrun ... pretrain_gpt.py ARGS`` line, or a file holding either (``#`` comments and
backslash-newlines allowed); everything before the ``.py`` script is the launcher's.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, NoReturn

from experiments.common.frameworks.settings import FrameworkConfig, Setting, is_file, match_preset, refuse
from simcore.errors import TrainsimError
from simcore.inputs import read_text

__all__ = ["read_megatron"]

NAME = "megatron"

# Arguments that do not change a training step's time or memory, ignored on purpose. Value
# arguments take one value unless the number says otherwise.
IGNORED_VALUE = {
    **dict.fromkeys(
        (
            "--lr",
            "--min-lr",
            "--lr-decay-style",
            "--lr-decay-iters",
            "--lr-decay-samples",
            "--lr-warmup-fraction",
            "--lr-warmup-iters",
            "--lr-warmup-samples",
            "--decoupled-lr",
            "--decoupled-min-lr",
            "--weight-decay",
            "--adam-beta1",
            "--adam-beta2",
            "--adam-eps",
            "--clip-grad",
            "--init-method-std",
            "--train-iters",
            "--train-samples",
            "--sgd-momentum",
        ),
        "optimizer hyper-parameter or run length: same step",
    ),
    **dict.fromkeys(
        (
            "--data-path",
            "--vocab-file",
            "--merge-file",
            "--split",
            "--data-cache-path",
            "--tokenizer-model",
            "--tiktoken-pattern",
            "--num-workers",
        ),
        "data and tokenizer files: the model sees tokens either way",
    ),
    **dict.fromkeys(
        (
            "--save",
            "--load",
            "--save-interval",
            "--log-interval",
            "--eval-interval",
            "--eval-iters",
            "--tensorboard-dir",
            "--exit-duration-in-mins",
            "--seed",
            "--wandb-project",
            "--wandb-exp-name",
            "--distributed-timeout-minutes",
        ),
        "checkpoint, logging, evaluation or run control: outside the step",
    ),
    **dict.fromkeys(
        (
            "--rotary-base",
            "--rotary-percent",
            "--norm-epsilon",
            "--attention-backend",
            "--empty-unused-memory-level",
            "--fp8-amax-history-len",
            "--fp8-amax-compute-algo",
            "--distributed-backend",
        ),
        "numerics or kernel choice with no modelled cost (fused attention is the default)",
    ),
    "--rampup-batch-size": "batch ramp-up: the steady-state step is the global batch's",
}
IGNORED_VALUE_NARGS = {"--rampup-batch-size": 3}
IGNORED_SWITCH = {
    "--grad-reduce-in-bf16": "the mixed precision mode reduces gradients in bf16 already",
    **dict.fromkeys(
        (
            "--use-mcore-models",
            "--use-flash-attn",
            "--no-masked-softmax-fusion",
            "--cross-entropy-loss-fusion",
            "--calculate-per-token-loss",
            "--manual-gc",
            "--apply-layernorm-1p",
            "--mock-data",
            "--no-create-attention-mask-in-dataloader",
            "--no-mmap-bin-files",
            "--bf16-grad-reduce",
            "--grad-reduce-in-bf16",
            "--overlap-grad-reduce",
            "--overlap-param-gather",
            "--fp8-param-gather",
            "--no-gradient-accumulation-fusion",
            "--use-legacy-models",
        ),
        "kernel fusion or overlap the step model already assumes, or data/logging only",
    ),
}
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}  # GPT-2's BPE vocabulary (Radford et al. 2019)
SCHEDULE_NOTE = "Megatron runs 1F1B, interleaved with virtual stages"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise TrainsimError(f"--from {NAME}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog=NAME, add_help=False, allow_abbrev=False)
    for flag in ("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
                 "--num-query-groups", "--kv-channels", "--seq-length", "--max-position-embeddings",
                 "--vocab-size", "--make-vocab-size-divisible-by", "--micro-batch-size",
                 "--global-batch-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--num-layers-per-virtual-pipeline-stage", "--virtual-pipeline-model-parallel-size",
                 "--context-parallel-size", "--expert-model-parallel-size", "--recompute-num-layers",
                 "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                 "--moe-shared-expert-intermediate-size", "--decoder-first-pipeline-num-layers",
                 "--decoder-last-pipeline-num-layers"):  # fmt: skip
        p.add_argument(flag, type=int)
    for flag in ("--attention-dropout", "--hidden-dropout", "--moe-expert-capacity-factor"):
        p.add_argument(flag, type=float)
    for flag, choices in (("--tokenizer-type", None), ("--normalization", ["LayerNorm", "RMSNorm"]),
                          ("--position-embedding-type", ["learned_absolute", "rope", "none"]),
                          ("--recompute-granularity", ["full", "selective"]),
                          ("--recompute-method", ["uniform", "block"]),
                          ("--optimizer", ["adam", "sgd"]), ("--fp8-format", ["e4m3", "hybrid"]),
                          ("--fp8-recipe", ["tensorwise", "delayed"]),
                          ("--cp-comm-type", ["p2p", "a2a"]),
                          ("--transformer-impl", ["local", "transformer_engine"])):  # fmt: skip
        p.add_argument(flag, choices=choices)
    for flag in ("--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights",
                 "--disable-bias-linear", "--sequence-parallel", "--use-distributed-optimizer",
                 "--use-torch-fsdp2", "--bf16", "--fp16", "--tp-comm-overlap", "--optimizer-cpu-offload",
                 "--cpu-offloading"):  # fmt: skip
        p.add_argument(flag, action="store_true")
    for flag in IGNORED_VALUE:
        p.add_argument(flag, nargs=IGNORED_VALUE_NARGS.get(flag, 1))
    for flag in IGNORED_SWITCH:
        p.add_argument(flag, action="store_true")
    return p


def _is_file(text: str) -> bool:
    return not text.lstrip().startswith("-") and "\n" not in text and is_file(text)


def _tokens(text: str) -> list[str]:
    if _is_file(text):
        text = read_text(Path(text), "a Megatron argument file")
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise TrainsimError(f"--from {NAME}: the argument line does not parse ({exc})") from None
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    return tokens[script + 1 :] if script is not None else tokens


def read_megatron(text: str) -> FrameworkConfig:
    """The settings of a Megatron-LM argument line (see the module docstring)."""
    tokens = _tokens(text)
    if not tokens:
        raise TrainsimError(
            f"--from {NAME}: no arguments given (pass the pretrain_gpt.py arguments or a file of them)"
        )
    args, unknown = _parser().parse_known_args(tokens)
    if unknown:
        first = next((t for t in unknown if t.startswith("-")), unknown[0])
        raise refuse(
            NAME, first, "unknown argument (not read, and not on the list of arguments ignored on purpose)"
        )
    given = {t.split("=", 1)[0] for t in tokens if t.startswith("--")}
    settings = [*_layout(args), *_batch(args), *_precision(args), *_recompute(args), *_optimizer(args),
                *_kernels(args)]  # fmt: skip
    shape = _shape(args) if args.num_layers is not None else None
    preset = match_preset(shape) if shape else None
    if preset:
        settings.insert(0, Setting("model", preset, "--num-layers/--hidden-size/... (the preset's shape)"))
    ignored = tuple(sorted(given & (set(IGNORED_VALUE) | set(IGNORED_SWITCH))))
    return FrameworkConfig(NAME, tuple(settings), None if preset else shape, ignored)


def _layout(args: argparse.Namespace) -> list[Setting]:
    out: list[Setting] = []
    degrees = {"tp": args.tensor_model_parallel_size, "pp": args.pipeline_model_parallel_size,
               "cp": args.context_parallel_size, "ep": args.expert_model_parallel_size}  # fmt: skip
    flags = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
             "cp": "--context-parallel-size", "ep": "--expert-model-parallel-size"}  # fmt: skip
    out += [
        Setting(k, str(d or 1), f"{flags[k]} {d}" if d else f"{flags[k]} (default 1)")
        for k, d in degrees.items()
    ]
    if (args.pipeline_model_parallel_size or 1) > 1:
        out.append(Setting("schedule", "1f1b", f"--pipeline-model-parallel-size: {SCHEDULE_NOTE}"))
    vpp = _vpp(args)
    if vpp is not None:
        out.append(vpp)
    if args.sequence_parallel:
        out.append(Setting("sequence-parallel", True, "--sequence-parallel"))
    if args.cp_comm_type:
        kinds = {"p2p": "ring", "a2a": "ulysses"}
        out.append(Setting("cp-kind", kinds[args.cp_comm_type], f"--cp-comm-type {args.cp_comm_type}"))
    if args.use_torch_fsdp2 and args.use_distributed_optimizer:
        raise refuse(NAME, "--use-torch-fsdp2", "contradicts --use-distributed-optimizer (pick one)")
    strategy, key = (
        ("fsdp", "--use-torch-fsdp2")
        if args.use_torch_fsdp2
        else (
            ("zero1", "--use-distributed-optimizer")
            if args.use_distributed_optimizer
            else ("ddp", "(default)")
        )
    )
    out.append(Setting("strategies", strategy, key))
    if args.tp_comm_overlap:
        out.append(Setting("tp-comm-overlap", True, "--tp-comm-overlap"))
    if args.decoder_first_pipeline_num_layers or args.decoder_last_pipeline_num_layers:
        out.append(Setting("pp-layers", _uneven(args), "--decoder-first/last-pipeline-num-layers"))
    if args.moe_expert_capacity_factor is not None:
        out.append(Setting("capacity-factor", f"{args.moe_expert_capacity_factor:g}",
                           f"--moe-expert-capacity-factor {args.moe_expert_capacity_factor:g}"))  # fmt: skip
    return out


def _vpp(args: argparse.Namespace) -> Setting | None:
    per_stage, virtual = args.num_layers_per_virtual_pipeline_stage, args.virtual_pipeline_model_parallel_size
    if per_stage is not None and virtual is not None:
        raise refuse(NAME, "--num-layers-per-virtual-pipeline-stage",
                     "contradicts --virtual-pipeline-model-parallel-size (give one)")  # fmt: skip
    if virtual is not None:
        return Setting("vpp", str(virtual), f"--virtual-pipeline-model-parallel-size {virtual}")
    if per_stage is None:
        return None
    pp = args.pipeline_model_parallel_size or 1
    if args.num_layers is None or args.num_layers % (pp * per_stage):
        raise refuse(NAME, "--num-layers-per-virtual-pipeline-stage",
                     f"{per_stage} must divide --num-layers / --pipeline-model-parallel-size")  # fmt: skip
    return Setting("vpp", str(args.num_layers // (pp * per_stage)),
                   f"--num-layers-per-virtual-pipeline-stage {per_stage}")  # fmt: skip


def _uneven(args: argparse.Namespace) -> str:
    """Stage sizes: Megatron's first/last stage counts, the rest split evenly (as Megatron-Core does)."""
    pp, layers = args.pipeline_model_parallel_size or 1, args.num_layers
    first = args.decoder_first_pipeline_num_layers
    last = args.decoder_last_pipeline_num_layers
    if layers is None or pp < 2:
        raise refuse(
            NAME, "--decoder-first-pipeline-num-layers", "needs --num-layers and a pipeline (pp >= 2)"
        )
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if (
        middle_stages < 0
        or rest < 0
        or (middle_stages and rest % middle_stages)
        or (not middle_stages and rest)
    ):
        raise refuse(NAME, "--decoder-first-pipeline-num-layers",
                     f"the first/last stage sizes leave {rest} layers for {middle_stages} stages")  # fmt: skip
    middle = [rest // middle_stages] * middle_stages if middle_stages else []
    return ",".join(
        str(n) for n in ([first] if first is not None else []) + middle + ([last] if last is not None else [])
    )


def _batch(args: argparse.Namespace) -> list[Setting]:
    out = []
    if args.global_batch_size is not None:
        out.append(
            Setting(
                "global-batch", str(args.global_batch_size), f"--global-batch-size {args.global_batch_size}"
            )
        )
    if args.micro_batch_size is not None:
        out.append(
            Setting("micro-batch", str(args.micro_batch_size), f"--micro-batch-size {args.micro_batch_size}")
        )
    if args.seq_length is not None:
        out.append(Setting("seq-len", str(args.seq_length), f"--seq-length {args.seq_length}"))
    return out


def _precision(args: argparse.Namespace) -> list[Setting]:
    if args.bf16 and args.fp16:
        raise refuse(NAME, "--fp16", "contradicts --bf16 (pick one)")
    dtype = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    key = "--bf16" if args.bf16 else "--fp16" if args.fp16 else "(neither --bf16 nor --fp16)"
    # Megatron keeps fp32 main weights and gradients beside bf16/fp16 ones (its Float16Module and
    # optimizer wrapper): the "mixed" precision mode.
    out = [Setting("dtype", dtype, key)]
    if dtype != "fp32":
        out.append(Setting("precision", "mixed", f"{key} (fp32 main weights)"))
    if args.fp8_format is not None:
        recipe = args.fp8_recipe or "delayed"  # Megatron's default --fp8-recipe
        out.append(Setting("fp8", recipe, f"--fp8-format {args.fp8_format} --fp8-recipe {recipe}"))
    elif args.fp8_recipe is not None:
        raise refuse(NAME, "--fp8-recipe", "has no effect without --fp8-format (give both)")
    return out


def _recompute(args: argparse.Namespace) -> list[Setting]:
    granularity, method, count = args.recompute_granularity, args.recompute_method, args.recompute_num_layers
    offload = []
    if args.optimizer_cpu_offload and args.cpu_offloading:
        raise refuse(
            NAME, "--cpu-offloading", "with --optimizer-cpu-offload: trainsim offloads one kind at a time"
        )
    if args.optimizer_cpu_offload:
        offload = [Setting("offload", "optimizer", "--optimizer-cpu-offload")]
    if args.cpu_offloading:
        offload = [Setting("offload", "activations", "--cpu-offloading")]
    offload = offload or [Setting("offload", "none", "(no --optimizer-cpu-offload or --cpu-offloading)")]
    if granularity is None:
        if method is not None or count is not None:
            raise refuse(NAME, "--recompute-method", "needs --recompute-granularity full")
        return [Setting("recompute", "none", "(no --recompute-granularity)"), *offload]
    if granularity == "selective":
        if method is not None:
            raise refuse(NAME, "--recompute-method", "applies to --recompute-granularity full only")
        return [Setting("recompute", "selective", "--recompute-granularity selective"), *offload]
    if method == "block" and count is not None:
        stage = (args.num_layers or 0) // (args.pipeline_model_parallel_size or 1)
        if count != stage:
            raise refuse(NAME, "--recompute-method block",
                         f"recomputes {count} of each stage's {stage} layers; trainsim has full and every-K "
                         "(every K-th block): use --recompute-method uniform")  # fmt: skip
    # uniform: every layer's input is checkpointed (in groups of --recompute-num-layers): all recomputed.
    return [Setting("recompute", "full", f"--recompute-granularity full --recompute-method {method or 'uniform'}"),
            *offload]  # fmt: skip


# Megatron-LM's default --transformer-impl (megatron/training/arguments.py,
# _add_transformer_engine_args: default='transformer_engine'): Megatron-Core's layers on Transformer
# Engine's fused modules unless --transformer-impl local is given.
DEFAULT_TRANSFORMER_IMPL = "transformer_engine"


def _kernels(args: argparse.Namespace) -> list[Setting]:
    """Whose kernels keep the activations and run the loss (simcore.compute.saved_tensors and
    cross_entropy_working_bytes). The loss is Megatron-Core's vocab-parallel cross entropy under
    either --transformer-impl (GPTModel.compute_language_model_loss calls
    tensor_parallel.vocab_parallel_cross_entropy, or its fused twin with --cross-entropy-loss-fusion)."""
    impl = args.transformer_impl or DEFAULT_TRANSFORMER_IMPL
    key = f"--transformer-impl {args.transformer_impl}" if args.transformer_impl else (
        f"--transformer-impl (default {DEFAULT_TRANSFORMER_IMPL})"
    )  # fmt: skip
    if impl == "local" and args.fp8_format is not None:
        raise refuse(
            NAME, "--transformer-impl local", "contradicts --fp8-format (FP8 runs on Transformer Engine)"
        )
    saved = "megatron-te" if impl == "transformer_engine" else "eager"
    return [Setting("saved-tensors", saved, key),
            Setting("cross-entropy", "megatron", "Megatron-Core's vocab-parallel cross entropy")]  # fmt: skip


def _optimizer(args: argparse.Namespace) -> list[Setting]:
    # Megatron's "adam" (its default) is Apex/TE FusedAdam with decoupled weight decay (AdamW); "sgd"
    # has momentum 0.9 (--sgd-momentum).
    name = {"adam": "adamw", "sgd": "sgd-momentum"}[args.optimizer or "adam"]
    source = f"--optimizer {args.optimizer}" if args.optimizer else "--optimizer (default adam)"
    # megatron/core/optimizer/__init__.py builds Apex's / Transformer Engine's FusedAdam or FusedSGD
    return [
        Setting("optimizer", name, source),
        Setting("optimizer-impl", "fused", f"{source}: fused kernels"),
    ]


def _vocab(args: argparse.Namespace) -> int:
    if args.vocab_size is not None:
        vocab = args.vocab_size
    elif args.tokenizer_type in TOKENIZER_VOCAB:
        vocab = TOKENIZER_VOCAB[args.tokenizer_type]
    else:
        raise refuse(NAME, "--vocab-size", f"needed with --tokenizer-type {args.tokenizer_type} "
                     f"(its vocabulary is in a file; known without one: {', '.join(TOKENIZER_VOCAB)})")  # fmt: skip
    return vocab


def _shape(args: argparse.Namespace) -> dict[str, Any]:
    """The model Megatron builds from these arguments, as a transformer shape-file mapping."""
    for flag in ("hidden_size", "num_attention_heads", "seq_length"):
        if getattr(args, flag) is None:
            raise refuse(NAME, "--" + flag.replace("_", "-"), "needed with --num-layers (the model's shape)")
    hidden, heads = args.hidden_size, args.num_attention_heads
    ffn = args.ffn_hidden_size
    if ffn is None:  # Megatron's default (arguments.py, validate_args)
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if args.swiglu else 4 * hidden
    if args.num_query_groups is not None and not args.group_query_attention:
        raise refuse(NAME, "--num-query-groups", "has no effect without --group-query-attention")
    shape: dict[str, Any] = {
        "name": "megatron-gpt", "layers": args.num_layers, "hidden": hidden, "heads": heads, "ffn": ffn,
        "vocab": _vocab(args), "seq_len": args.seq_length, "gated_ffn": args.swiglu,
        "norm": "rmsnorm" if args.normalization == "RMSNorm" else "layernorm",
        "bias": not args.disable_bias_linear,
        "positions": "rotary" if args.position_embedding_type == "rope" else "learned",
        "tied_embeddings": not args.untie_embeddings_and_output_weights,
        # Megatron's dropout defaults are 0.1 (attention and hidden)
        "dropout": bool((args.attention_dropout if args.attention_dropout is not None else 0.1)
                        or (args.hidden_dropout if args.hidden_dropout is not None else 0.1)),
    }  # fmt: skip
    if args.group_query_attention:
        shape["kv_heads"] = args.num_query_groups or 1
    if args.kv_channels is not None and args.kv_channels != hidden // heads:
        shape["head_dim"] = args.kv_channels
    if args.max_position_embeddings is not None and shape["positions"] == "learned":
        shape["max_positions"] = args.max_position_embeddings
    if args.num_experts is not None:
        shape["moe"] = _moe(args, ffn)
    return shape


def _moe(args: argparse.Namespace, ffn: int) -> dict[str, Any]:
    moe: dict[str, Any] = {"experts": args.num_experts, "top_k": args.moe_router_topk or 2,
                           "expert_ffn": args.moe_ffn_hidden_size or ffn}  # fmt: skip
    if args.moe_shared_expert_intermediate_size:
        width = moe["expert_ffn"]
        if args.moe_shared_expert_intermediate_size % width:
            raise refuse(NAME, "--moe-shared-expert-intermediate-size",
                         f"must be a multiple of the expert width {width} (shared experts of that width)")  # fmt: skip
        moe["shared_experts"] = args.moe_shared_expert_intermediate_size // width
    return moe
