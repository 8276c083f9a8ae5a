"""DeepSpeed JSON configs in (``--from deepspeed FILE.json``) and out (``plan --emit deepspeed``).

Keys are DeepSpeed's ``deepspeed/runtime/constants.py`` and ``deepspeed/runtime/zero/config.py``
at commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641. A DeepSpeed JSON holds the data-parallel side
only (ZeRO stage, batch, precision, optimizer, offload): tensor and pipeline degrees live in the
training script (Megatron-DeepSpeed arguments, ``PipelineModule``), so a layout with them has no
DeepSpeed JSON of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from experiments.common.frameworks.levers import Emitted, default_optimizer_impl, plan_levers
from experiments.common.frameworks.settings import FrameworkConfig, Setting, config_file, refuse
from simcore.compute.fp8 import resolve_fp8
from simcore.errors import TrainsimError
from simcore.inputs import read_text

__all__ = ["emit_deepspeed", "read_deepspeed"]

NAME = "deepspeed"

IGNORED_TOP = {
    **dict.fromkeys(("steps_per_print", "wall_clock_breakdown", "tensorboard", "wandb", "csv_monitor",
                     "comms_logger", "flops_profiler", "dump_state", "memory_breakdown"), "logging and profiling"),
    **dict.fromkeys(("scheduler", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
                     "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "seed"),
                    "numerics or checks: same step"),
    **dict.fromkeys(("checkpoint", "dataloader_drop_last", "elasticity"), "outside the step"),
}  # fmt: skip
IGNORED_ZERO = {
    **dict.fromkeys(("contiguous_gradients", "reduce_scatter", "allgather_partitions",
                     "round_robin_gradients", "use_multi_rank_bucket_allreduce", "memory_efficient_linear"),
                    "DeepSpeed's defaults: reduce-scattered contiguous buckets, as modelled"),
    **dict.fromkeys(("stage3_param_persistence_threshold", "param_persistence_threshold", "sub_group_size",
                     "stage3_model_persistence_threshold"),
                    "ZeRO-3 persistence and optimizer sub-groups: not modelled (small parameters are few here)"),
    **dict.fromkeys(("stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
                     "gather_16bit_weights_on_model_save", "elastic_checkpoint", "load_from_fp32_weights",
                     "ignore_unused_parameters", "legacy_stage1"), "checkpointing or module bookkeeping"),
}  # fmt: skip
IGNORED_FP16 = (
    "loss_scale",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "min_loss_scale",
    "consecutive_hysteresis",
    "auto_cast",
)  # loss scaling: no modelled cost
IGNORED_OFFLOAD = (
    "pin_memory",
    "buffer_count",
    "buffer_size",
    "max_in_cpu",
    "fast_init",
    "nvme_path",
    "pipeline_read",
    "pipeline_write",
    "ratio",
)  # how the host copy is staged
IGNORED_AC = (
    "contiguous_memory_optimization",
    "number_checkpoints",
    "synchronize_checkpoint_boundary",
    "profile",
)
OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "fusedadam": "adamw", "cpuadam": "adamw", "sgd": "sgd"}


def _object(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise refuse(NAME, key, "must be a JSON object")
    return value


def _positive(value: Any, key: str) -> int:
    if value == "auto":
        raise refuse(NAME, key, '"auto" is filled in by the Hugging Face Trainer; give a number')
    if isinstance(value, float) and value.is_integer():  # 5e7: DeepSpeed's pp_int reads it as 50000000
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**40:
        raise refuse(NAME, key, f"{value!r} is not a positive whole number")
    return value


def _flag(table: Mapping[str, Any], key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise refuse(NAME, f"{where}.{key}", f"{value!r} is not true or false")
    return value


def read_deepspeed(path_text: str, *, gpus: int | None = None) -> FrameworkConfig:
    """The settings of a DeepSpeed config; ``gpus`` (the command's ``--gpus``) completes a batch
    given as micro-batch x accumulation only."""
    path = config_file(path_text, NAME, "DeepSpeed .json")
    try:
        data = json.loads(read_text(path, "a DeepSpeed JSON file"))
    except (json.JSONDecodeError, UnicodeError) as exc:
        raise TrainsimError(f"--from {NAME} {path_text}: not valid JSON ({exc})") from None
    data = _object(data, "the document")
    known = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
             "zero_optimization", "bf16", "fp16", "optimizer", "activation_checkpointing"}  # fmt: skip
    for key in data:
        if key not in known and key not in IGNORED_TOP:
            raise refuse(NAME, key, "unknown key (not read, and not on the list ignored on purpose)")
    settings = [
        *_batch(data, gpus),
        *_zero(data),
        *_precision(data),
        *_optimizer(data),
        *_checkpointing(data),
    ]
    # A DeepSpeed JSON holds no model parallelism (the training script does): every degree 1.
    settings += [
        Setting(k, "1", "(a DeepSpeed JSON has no model parallelism)") for k in ("tp", "pp", "cp", "ep")
    ]
    if not any(s.flag == "offload" for s in settings):
        settings.append(
            Setting("offload", "none", "(no offload_optimizer, offload_param or cpu_checkpointing)")
        )
    zero = data.get("zero_optimization", {})
    stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
    stage_keys = (
        [*_buckets(zero, stage)[1], *_zero3_fetch(zero, stage)[1]] if isinstance(zero, Mapping) else []
    )
    ignored = tuple(sorted(k for k in data if k in IGNORED_TOP)) + tuple(stage_keys)
    return FrameworkConfig(NAME, tuple(settings), None, ignored)


def _batch(data: Mapping[str, Any], gpus: int | None) -> list[Setting]:
    """Micro-batch and global batch: DeepSpeed's train_batch_size = micro-batch x accumulation x GPUs,
    any two of the three given (the GPU count from ``--gpus`` where needed)."""
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    tb, mb, gas = (_positive(data[k], k) if k in data else None for k in keys)
    if tb is None and mb is None:
        if gas is not None:
            raise refuse(
                NAME,
                "gradient_accumulation_steps",
                "needs train_batch_size or train_micro_batch_size_per_gpu",
            )
        return []
    out: list[Setting] = []
    if tb is not None and mb is not None and gas is not None:
        if tb % (mb * gas):
            raise refuse(
                NAME, "train_batch_size", f"{tb} is not micro-batch {mb} x accumulation {gas} x GPUs"
            )
        out.append(Setting("gpus", str(tb // (mb * gas)), "train_batch_size / (micro-batch x accumulation)"))
    elif tb is None or mb is None:
        if gpus is None:
            missing = "train_batch_size" if tb is None else "train_micro_batch_size_per_gpu"
            raise refuse(
                NAME, missing, "absent: the other batch keys give it only with one GPU count, --gpus N"
            )
        if tb is None:
            tb = (mb or 1) * (gas or 1) * gpus
        elif tb % ((gas or 1) * gpus):
            raise refuse(NAME, "train_batch_size", f"{tb} does not divide by accumulation x --gpus {gpus}")
        else:
            mb = tb // ((gas or 1) * gpus)
    out.append(Setting("micro-batch", str(mb), _source(data, "train_micro_batch_size_per_gpu", mb)))
    out.append(Setting("global-batch", str(tb), _source(data, "train_batch_size", tb)))
    return out


def _source(data: Mapping[str, Any], key: str, value: int | None) -> str:
    return f"{key} = {value}" if key in data else f"{key} (from the other batch keys and --gpus)"


def _zero(data: Mapping[str, Any]) -> list[Setting]:
    zero = _object(data.get("zero_optimization", {}), "zero_optimization")
    read = {"stage", "offload_optimizer", "offload_param", "reduce_bucket_size", "allgather_bucket_size",
            "overlap_comm", "cpu_offload", *ZERO3_FLAGS,
            "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients"}  # fmt: skip
    for key in zero:
        if key not in read and key not in IGNORED_ZERO:
            raise refuse(
                NAME,
                f"zero_optimization.{key}",
                "unknown key (not read, and not on the list ignored on purpose)",
            )
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool) or stage not in (0, 1, 2, 3):  # 1.0 too
        raise refuse(NAME, "zero_optimization.stage", f"{stage!r} is not 0, 1, 2 or 3")
    out = [
        Setting("strategies", ("ddp", "zero1", "zero2", "zero3")[stage], f"zero_optimization.stage = {stage}")
    ]
    for key, why in (("zero_hpz_partition_size", "ZeRO++ hierarchical partitions"),
                     ("zero_quantized_weights", "ZeRO++ quantized weights"),
                     ("zero_quantized_gradients", "ZeRO++ quantized gradients")):  # fmt: skip
        if zero.get(key) not in (None, False, 1):
            raise refuse(NAME, f"zero_optimization.{key}", f"{why} are not modelled")
    buckets, _ = _buckets(zero, stage)
    out += buckets + _zero3_fetch(zero, stage)[0]
    devices = {k: _offload_device(zero, k) for k in ("offload_optimizer", "offload_param")}
    if _flag(zero, "cpu_offload", "zero_optimization"):
        devices["offload_optimizer"] = "cpu"  # the legacy switch of ZeRO-Offload
    if devices["offload_param"] != "none":
        if stage != 3:
            raise refuse(NAME, "zero_optimization.offload_param", f"needs stage 3 (stage is {stage})")
        out.append(
            Setting(
                "offload", "params", f"zero_optimization.offload_param.device = {devices['offload_param']}"
            )
        )
    elif devices["offload_optimizer"] != "none":
        out.append(Setting("offload", "optimizer",
                           f"zero_optimization.offload_optimizer.device = {devices['offload_optimizer']}"))  # fmt: skip
    return out


# reduce_bucket_size and allgather_bucket_size's default, elements (deepspeed/runtime/zero/config.py)
ZERO_DEFAULT_BUCKET = 500_000_000
# zero_optimization keys of ZeRO-1/2's buckets (elements) and overlap -> the what-if's flags
BUCKET_FLAGS = {
    "reduce_bucket_size": "zero-bucket-size",
    "allgather_bucket_size": "zero-allgather-bucket-size",
}


# ZeRO-3's fetch tuning (with its stage3_-less aliases, zero/config.py) -> the what-if's flags
ZERO3_FLAGS = {
    **dict.fromkeys(("stage3_prefetch_bucket_size", "prefetch_bucket_size"), "zero3-prefetch-bucket-size"),
    **dict.fromkeys(("stage3_max_live_parameters", "max_live_parameters"), "zero3-max-live-parameters"),
    **dict.fromkeys(("stage3_max_reuse_distance", "max_reuse_distance"), "zero3-max-reuse-distance"),
}


def _zero3_fetch(zero: Mapping[str, Any], stage: int) -> tuple[list[Setting], list[str]]:
    """(settings, keys ignored): ZeRO-3's prefetch bucket, live-parameter cap and reuse distance
    (elements); a key and its alias both given is refused; below stage 3 DeepSpeed does not use
    them: listed as ignored, with that reason."""
    out: dict[str, Setting] = {}
    for key, flag in ZERO3_FLAGS.items():
        if key not in zero:
            continue
        if flag in out:
            raise refuse(
                NAME, f"zero_optimization.{key}", f"given twice (with {out[flag].source.split(' =')[0]})"
            )
        size = _positive(zero[key], f"zero_optimization.{key}")
        out[flag] = Setting(flag, str(size), f"zero_optimization.{key} = {size}")
    if stage == 3:
        return list(out.values()), []
    return [], [f"{s.source} (a ZeRO-3 key; stage {stage} here)" for s in out.values()]


def _buckets(zero: Mapping[str, Any], stage: int) -> tuple[list[Setting], list[str]]:
    """(settings, keys ignored): ZeRO-1/2's reduction and all-gather buckets and overlap_comm. At
    stage 0 and 3 they are not the modelled step's (stage 0 all-reduces in DeepSpeed's fixed buffers,
    stage 3 is priced per block from its fetch tuning, overlapped as DeepSpeed's default): listed as
    ignored there, with that reason."""
    out = []
    for key, flag in BUCKET_FLAGS.items():
        if key in zero:
            size = _positive(zero[key], f"zero_optimization.{key}")
            out.append(Setting(flag, str(size), f"zero_optimization.{key} = {size}"))
    if "overlap_comm" in zero:
        overlap = _flag(zero, "overlap_comm", "zero_optimization")
        out.append(Setting("zero-overlap-comm", "on" if overlap else "off",
                           f"zero_optimization.overlap_comm = {str(overlap).lower()}"))  # fmt: skip
    if stage in (1, 2):
        return out, []
    return [], [f"{s.source} (a stage 1/2 key; stage {stage} here)" for s in out]


def _offload_device(zero: Mapping[str, Any], key: str) -> str:
    if key not in zero or zero[key] is None:
        return "none"
    table = _object(zero[key], f"zero_optimization.{key}")
    for sub in table:
        if sub != "device" and sub not in IGNORED_OFFLOAD:
            raise refuse(NAME, f"zero_optimization.{key}.{sub}", "unknown key")
    device = table.get("device", "none")
    if device not in ("cpu", "nvme", "none"):
        raise refuse(NAME, f"zero_optimization.{key}.device", f"{device!r} is not cpu, nvme or none")
    return str(device)


def _precision(data: Mapping[str, Any]) -> list[Setting]:
    enabled = {}
    for key in ("bf16", "fp16"):
        table = _object(data.get(key, {}), key)
        for sub in table:
            if sub != "enabled" and not (key == "fp16" and sub in IGNORED_FP16):
                raise refuse(NAME, f"{key}.{sub}", "unknown key")
        if table.get("enabled") == "auto":
            raise refuse(
                NAME, f"{key}.enabled", '"auto" is filled in by the Hugging Face Trainer; give true or false'
            )
        enabled[key] = _flag(table, "enabled", key)
    if enabled["bf16"] and enabled["fp16"]:
        raise refuse(NAME, "fp16.enabled", "contradicts bf16.enabled (pick one)")
    if not (enabled["bf16"] or enabled["fp16"]):
        return [Setting("dtype", "fp32", "neither bf16 nor fp16 enabled")]
    dtype = "bf16" if enabled["bf16"] else "fp16"
    # DeepSpeed keeps fp32 master weights and optimizer state beside the bf16/fp16 model ("mixed")
    return [
        Setting("dtype", dtype, f"{dtype}.enabled = true"),
        Setting("precision", "mixed", f"{dtype}.enabled = true"),
    ]


def _optimizer(data: Mapping[str, Any]) -> list[Setting]:
    if "optimizer" not in data:
        return []
    table = _object(data["optimizer"], "optimizer")
    for sub in table:
        if sub not in ("type", "params"):
            raise refuse(NAME, f"optimizer.{sub}", "unknown key (type and params are read)")
    kind = table.get("type")
    name = OPTIMIZERS.get(str(kind).lower()) if isinstance(kind, str) else None
    if name is None:
        raise refuse(
            NAME, "optimizer.type", f"{kind!r} is not modelled; allowed: Adam, AdamW, FusedAdam, CPUAdam, SGD"
        )
    params = _object(table.get("params", {}), "optimizer.params")
    if name == "adamw" and params.get("adam_w_mode") is False:
        name = "adam"  # DeepSpeed's Adam is AdamW unless adam_w_mode is false (FusedAdam's default True)
    if name == "sgd" and params.get("momentum", 0):
        name = "sgd-momentum"
    out = [Setting("optimizer", name, f"optimizer.type = {kind}")]
    if name in ("adam", "adamw") and str(kind).lower() != "cpuadam":
        # deepspeed/runtime/engine.py, _configure_basic_optimizer: FusedAdam on GPUs, at every stage
        out.append(Setting("optimizer-impl", "fused", f"optimizer.type = {kind}: DeepSpeed's FusedAdam"))
    return out


def _checkpointing(data: Mapping[str, Any]) -> list[Setting]:
    if "activation_checkpointing" not in data:
        return [Setting("recompute", "none", "(no activation_checkpointing section)")]
    table = _object(data["activation_checkpointing"], "activation_checkpointing")
    for sub in table:
        if sub not in ("partition_activations", "cpu_checkpointing") and sub not in IGNORED_AC:
            raise refuse(NAME, f"activation_checkpointing.{sub}", "unknown key")
    if _flag(table, "partition_activations", "activation_checkpointing"):
        raise refuse(NAME, "activation_checkpointing.partition_activations",
                     "splitting checkpoints across tensor-parallel ranks is not modelled")  # fmt: skip
    # The section configures deepspeed.checkpointing.checkpoint, which the model calls per block
    # (Megatron-DeepSpeed --checkpoint-activations): every block recomputed.
    out = [Setting("recompute", "full", "activation_checkpointing")]
    if _flag(table, "cpu_checkpointing", "activation_checkpointing"):
        out.append(Setting("offload", "activations", "activation_checkpointing.cpu_checkpointing = true"))
    return out


# --------------------------------------------------------------------------------------------------
# Out


def emit_deepspeed(layout: Mapping[str, Any], run: Mapping[str, Any]) -> Emitted | None:
    """The DeepSpeed JSON of a plan's layout, or None when DeepSpeed's JSON cannot say it (model
    parallelism, FSDP/HSDP, selective recompute, parameter offload outside ZeRO-3); levers the JSON
    cannot hold (they are the training script's) are named in the result's ``cannot``."""
    stages = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
    if layout["strategy"] not in stages or any(layout[k] > 1 for k in ("tp", "pp", "cp", "ep")):
        return None
    if layout["recompute"] not in ("none", "full"):
        return None
    stage = stages[layout["strategy"]]
    zero: dict[str, Any] = {"stage": stage}
    if stage in (1, 2):  # the buckets and overlap the plan priced (DeepSpeed's defaults where unset)
        zero["reduce_bucket_size"] = int(run.get("zero_bucket_size") or ZERO_DEFAULT_BUCKET)
        zero["allgather_bucket_size"] = int(run.get("zero_allgather_bucket_size") or ZERO_DEFAULT_BUCKET)
        zero["overlap_comm"] = run.get("zero_overlap_comm") == "on"
    if stage == 3:  # the fetch tuning the plan was given (DeepSpeed's defaults where unset)
        for key in ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance"):
            value = run.get(ZERO3_FLAGS[key].replace("-", "_"))
            if value is not None:
                zero[key] = int(value)
    if layout["offload"] == "optimizer":
        zero["offload_optimizer"] = {"device": "cpu"}
    elif layout["offload"] == "params" and stage == 3:
        zero["offload_param"] = {"device": "cpu"}
    elif layout["offload"] != "none":
        return None
    cannot: list[tuple[str, str]] = []
    doc: dict[str, Any] = {
        "train_batch_size": run["global_batch"],
        "train_micro_batch_size_per_gpu": layout["micro_batch"],
        "gradient_accumulation_steps": run["global_batch"] // (layout["micro_batch"] * layout["dp"]),
        "zero_optimization": zero,
    }
    dtype, fp8 = resolve_fp8(run["dtype"], run.get("fp8", "none"))
    low = "bf16" if dtype == "fp8" else dtype
    if low in ("bf16", "fp16"):
        doc[low] = {"enabled": True}
    elif low == "tf32":
        cannot.append(("dtype", "tf32: a DeepSpeed JSON has no TF32 switch (the script's torch.backends)"))
    if fp8 != "none":
        cannot.append(
            ("fp8", f"{fp8}: FP8 linears are the model's (Transformer Engine, torchao), not the JSON's")
        )
    types = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "sgd-momentum": "SGD"}
    if run["optimizer"] in types:
        params: dict[str, Any] = {"momentum": 0.9} if run["optimizer"] == "sgd-momentum" else {}
        if run["optimizer"] == "adam":
            params["adam_w_mode"] = False
        doc["optimizer"] = {"type": types[run["optimizer"]], "params": params}
    else:
        cannot.append(("optimizer", f"{run['optimizer']}: DeepSpeed's optimizer types are Adam, AdamW, SGD"))
    if layout["recompute"] == "full":
        doc["activation_checkpointing"] = {"cpu_checkpointing": False}
    cannot += _script_levers(layout, run)
    return Emitted(json.dumps(doc, indent=2), tuple(cannot))


def _script_levers(layout: Mapping[str, Any], run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The levers the training script holds, not the JSON (named when the plan's differ from what
    the JSON read back means)."""
    cannot = []
    if run.get("seq_len"):
        cannot.append(
            ("seq-len", f"{run['seq_len']}: the sequence length is the script's data (give --seq-len)")
        )
    if run.get("compile"):
        cannot.append(("compile", "torch.compile is the script's call (engine.compile()), not the JSON's"))
    if run.get("saved_tensors", "eager") != "eager":
        cannot.append(("saved-tensors", f"{run['saved_tensors']}: the script's model decides its kernels"))
    if run.get("cross_entropy", "torch") != "torch":
        cannot.append(("cross-entropy", f"{run['cross_entropy']}: the script's loss decides it"))
    levers = plan_levers(layout, run)
    if levers["precision"] not in ("mixed", "fp32", "tf32"):
        cannot.append(
            ("precision", f"{levers['precision']}: DeepSpeed's bf16/fp16 keep fp32 master weights (mixed)")
        )
    # Adam: DeepSpeed builds FusedAdam at every stage; another type: the JSON does not say, so it
    # reads back as --optimizer-impl auto
    adam = run["optimizer"] in ("adam", "adamw")
    built = "fused" if adam else default_optimizer_impl(layout["strategy"])
    if levers["optimizer-impl"] != built:
        why = "DeepSpeed builds FusedAdam at every stage" if adam else "the JSON has no implementation switch"
        cannot.append(("optimizer-impl", f"{levers['optimizer-impl']}: {why}"))
    return cannot
