"""``plan --emit torchtitan``: a plan's layout as a torchtitan TOML job config (keys and defaults as
:mod:`experiments.common.frameworks.torchtitan` reads them back)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.common.frameworks.levers import Emitted, plan_levers
from experiments.common.frameworks.torchtitan import IMPLEMENTATIONS, MODELS
from simcore.compute.fp8 import resolve_fp8

__all__ = ["emit_torchtitan"]


def emit_torchtitan(layout: Mapping[str, Any], run: Mapping[str, Any]) -> Emitted | None:
    """The torchtitan TOML of a plan's layout, or None when torchtitan cannot run it (ZeRO-1/2,
    zero-bubble schedules, Megatron's selective recompute, offload other than FSDP's); levers it
    runs differently are named in the result's ``cannot``."""
    dp, pp, vpp = layout["dp"], layout["pp"], layout["vpp"]
    sharding = {"fsdp": (1, dp), "hsdp": (run["hsdp_replicas"], dp // run["hsdp_replicas"]),
                "ddp": (dp, 1)}.get(layout["strategy"])  # fmt: skip
    recompute = {"none": ("none", None), "full": ("full", None), "selective-op": ("selective", "op")}.get(
        layout["recompute"]
    )
    if layout["recompute"].startswith("every-"):
        recompute = ("selective", layout["recompute"].split("-", 1)[1])
    schedule = {"1f1b": "Interleaved1F1B" if vpp > 1 else "1F1B", "gpipe": "GPipe"}.get(layout["schedule"])
    if (
        sharding is None
        or recompute is None
        or (schedule is None and pp > 1)
        or (schedule == "GPipe" and vpp > 1)  # torchtitan's GPipe runs one stage per rank
        or layout["offload"] not in ("none", "params")
        or (vpp > 1 and run["shape"]["layers"] % (pp * vpp))
    ):
        return None
    cannot: list[tuple[str, str]] = []
    flavor = next((key for key, preset in MODELS.items() if preset == run["model"]), None)
    micro = layout["micro_batch"]
    local = run["global_batch"] // dp if pp > 1 else micro
    lines = ["[model]", *([f'name = "{flavor[0]}"', f'flavor = "{flavor[1]}"'] if flavor else
                          [f"# {run['model']}: no torchtitan flavor; give [model] by hand"])]  # fmt: skip
    fp8 = _emit_fp8(run, cannot)
    if fp8:
        lines.append('converters = ["quantize.linear.float8"]')
    lines += ["", "[training]", f"local_batch_size = {local}", f"global_batch_size = {run['global_batch']}",
              f"seq_len = {run['seq_len']}", *_emit_dtype(layout, run, cannot)]  # fmt: skip
    if layout["offload"] == "params":
        lines.append("enable_cpu_offload = true")
    lines += ["", "[parallelism]", f"data_parallel_replicate_degree = {sharding[0]}",
              f"data_parallel_shard_degree = {sharding[1]}", f"tensor_parallel_degree = {layout['tp']}",
              f"pipeline_parallel_degree = {pp}", f"context_parallel_degree = {layout['cp']}",
              f"expert_parallel_degree = {layout['ep']}"]  # fmt: skip
    lines += _emit_layout_notes(layout, run, cannot)
    if pp > 1:  # the plan's even split: the embedding and the loss weigh no block (torchtitan's default 1)
        lines += [f'pipeline_parallel_schedule = "{schedule}"', f"pipeline_parallel_microbatch_size = {micro}",
                  "pipeline_parallel_first_stage_less_layers = 0", "pipeline_parallel_last_stage_less_layers = 0"]  # fmt: skip
        if vpp > 1:
            lines.append(f"pipeline_parallel_layers_per_stage = {run['shape']['layers'] // (pp * vpp)}")
    lines += ["", "[activation_checkpoint]", f'mode = "{recompute[0]}"']
    if recompute[1]:
        lines.append(f'selective_ac_option = "{recompute[1]}"')
    compile_ = bool(run.get("compile")) or (layout.get("tp_comm_overlap") and layout["tp"] > 1)
    if compile_:  # async TP needs the compiled model (torchtitan/distributed/tensor_parallel.py)
        lines += ["", "[compile]", "enable = true", 'components = ["model", "loss"]']
    if compile_ and not run.get("compile"):
        cannot.append(("compile", "off: torchtitan's async TP runs only with [compile] enable = true"))
    lines += fp8
    lines += _emit_optimizer(layout, run, cannot)
    _precision_note(layout, run, bool(fp8), cannot)
    return Emitted("\n".join(lines) + "\n", tuple(cannot))


def _precision_note(
    layout: Mapping[str, Any], run: Mapping[str, Any], fp8_written: bool, cannot: list[tuple[str, str]]
) -> None:
    """torchtitan runs torch's own precision (DDP autocast, FSDP2 MixedPrecisionPolicy): the plan's
    ``auto`` unless that followed a recipe torchtitan does not have (Transformer Engine's delayed)."""
    want = plan_levers(layout, run)["precision"]
    own = plan_levers(layout, {**run, "fp8": run.get("fp8", "none") if fp8_written else "none",
                               "dtype": "bf16" if run["dtype"] == "fp8" else run["dtype"]})["precision"]  # fmt: skip
    if own != want:
        cannot.append(("precision", f"{want}: torchtitan runs torch's own mixed precision ({own} here)"))


def _emit_dtype(
    layout: Mapping[str, Any], run: Mapping[str, Any], cannot: list[tuple[str, str]]
) -> list[str]:
    low = "bf16" if run["dtype"] == "fp8" else run["dtype"]
    if low not in ("bf16", "fp32"):
        cannot.append(("dtype", f"{low}: torchtitan trains in bfloat16 or float32"))
    param = "float32" if low in ("fp32", "tf32") else "bfloat16"
    lines = [f'mixed_precision_param = "{param}"']
    if param == "bfloat16" and not run.get("master_weights", True):  # no fp32 copy: dtype bfloat16
        lines.append('dtype = "bfloat16"')
    return lines


def _emit_layout_notes(
    layout: Mapping[str, Any], run: Mapping[str, Any], cannot: list[tuple[str, str]]
) -> list[str]:
    lines = []
    if layout["tp"] > 1 and not layout["sequence_parallel"]:
        cannot.append(("sequence-parallel", "off: torchtitan's tensor parallelism is sequence-parallel"))
    if layout.get("tp_comm_overlap") and layout["tp"] > 1:
        lines.append("enable_async_tensor_parallel = true")
    if layout["cp"] > 1:
        if run.get("ring_merge", "fused") == "fused":
            cannot.append(
                ("ring-merge", "fused: torch's context_parallel merges ring attention's steps eagerly")
            )
        if run.get("ring_kv", "grouped") == "grouped":
            cannot.append(("ring-kv", "grouped: torchtitan's llama repeats key/value heads before attention"))
    if run.get("saved_tensors", "eager") != "eager":
        cannot.append(("saved-tensors", f"{run['saved_tensors']}: torchtitan's kernels are eager PyTorch's"))
    if run.get("cross_entropy", "torch") != "torch":
        cannot.append(
            ("cross-entropy", f"{run['cross_entropy']}: torchtitan's loss is torch's cross entropy")
        )
    return lines


def _emit_fp8(run: Mapping[str, Any], cannot: list[tuple[str, str]]) -> list[str]:
    """``[quantize.linear.float8]`` for torchao's recipes; tensorwise with the FP8 all-gather and
    the precomputed scales torchtitan recommends for it (job_config.py, Float8Linear)."""
    fp8 = resolve_fp8(run["dtype"], run.get("fp8", "none"))[1]
    if fp8 == "none":
        return []
    if fp8 not in ("tensorwise", "rowwise"):
        cannot.append(("fp8", f"{fp8}: torchtitan's float8 (torchao) scales tensorwise or rowwise"))
        return []
    lines = ["", "[quantize.linear.float8]", f'recipe_name = "{fp8}"']
    if fp8 == "tensorwise":
        lines += ["enable_fsdp_float8_all_gather = true", "precompute_float8_dynamic_scale_for_fsdp = true"]
    return [*lines, 'filter_fqns = ["output"]']


def _emit_optimizer(
    layout: Mapping[str, Any], run: Mapping[str, Any], cannot: list[tuple[str, str]]
) -> list[str]:
    names = {"adamw": "AdamW", "adam": "Adam"}
    impl = {v: k for k, v in IMPLEMENTATIONS.items()}[str(plan_levers(layout, run)["optimizer-impl"])]
    if run["optimizer"] not in names:
        cannot.append(("optimizer", f"{run['optimizer']}: torchtitan builds AdamW or Adam"))
        return ["", "[optimizer]", f'implementation = "{impl}"']
    return ["", "[optimizer]", f'name = "{names[run["optimizer"]]}"', f'implementation = "{impl}"']
