"""torchtitan TOML job configs in (``--from torchtitan FILE.toml``); out is :mod:`.torchtitan_emit`.

Sections and keys are torchtitan's ``torchtitan/config/job_config.py`` at commit
238fa9953e4aec2a62582121564273d7cbb1e9f1 (the last with TOML job configs; e.g.
``torchtitan/models/llama3/train_configs/llama3_8b.toml``). ``[float8]`` is the name of
``[quantize.linear.float8]`` before commit 5b5d46856b400c8550989415bee91473aab4f921; both are read.
A key absent from the file takes torchtitan's default at that commit, recorded as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.common.frameworks.settings import FrameworkConfig, Setting, config_file, refuse
from experiments.common.frameworks.toml import parse_toml
from simcore.inputs import read_text
from simcore.workload.loader import _preset_table

__all__ = ["IMPLEMENTATIONS", "MODELS", "read_torchtitan"]

NAME = "torchtitan"

# [model] name, flavor -> our preset (torchtitan/models/*/__init__.py; llama3 "8B" is Llama 3.1 8B,
# the same shape as Llama 3 8B).
MODELS = {
    ("llama3", "8B"): "llama3-8b",
    ("llama3", "70B"): "llama3-70b",
    ("llama3", "405B"): "llama3.1-405b",
    ("deepseek_v3", "671B"): "deepseek-v3",
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
    ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
    ("gpt_oss", "120b"): "gpt-oss-120b",
}

# Whole sections that do not change a training step's time or memory.
IGNORED_SECTIONS = {
    "job": "job name and output folder",
    "profiling": "profiler traces (a profiled step is not the steady state)",
    "metrics": "logging",
    "checkpoint": "checkpoint saving and loading: outside the step",
    "validation": "evaluation between steps",
    "lr_scheduler": "learning-rate schedule: same step",
    "comm": "timeouts and trace buffers",
    "debug": "seeds and determinism checks",
    "fault_tolerance": "torchft replica groups: not modelled, and off by default",
    "experimental": "custom imports",
    "memory_estimation": "torchtitan's own estimator run",
}
# Keys of read sections that do not change a step, ignored on purpose.
IGNORED_KEYS = {
    "model": {"hf_assets_path": "tokenizer and weights folder", "tokenizer_path": "tokenizer file",
              "print_after_conversion": "printing"},
    "optimizer": dict.fromkeys(("lr", "eps", "weight_decay", "beta1", "beta2"), "hyper-parameter: same step"),
    "training": {"max_norm": "gradient clipping (one norm per step, not modelled)", "steps": "run length",
                 "dataset": "data set", "dataset_path": "data set", "gc_freq": "host garbage collection",
                 "gc_debug": "host garbage collection", "dataloader": "data loading (not modelled)",
                 "mixed_precision_reduce": "float32 is the only value (fsdp-mp reduces in fp32)"},
    "parallelism": {"disable_loss_parallel": "the loss is priced on the full logits either way",
                    "pipeline_parallel_expert_parallel_overlap": "EP/PP overlap: not modelled (exposed)",
                    "context_parallel_load_balancer": "causal load balance: the model assumes a balanced split",
                    "context_parallel_rotate_method": "both rotate K/V around the CP group: ring attention here",
                    "expert_parallel_comm_backend": "standard all-to-all is modelled"},
    "activation_checkpoint": dict.fromkeys(("per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                                            "preserve_rng_state", "determinism_check", "debug",
                                            "visualize_memory_budget_pareto"),
                                           "a detail of the recompute, not its cost"),
    "compile": {"components": "what is compiled (the whole model here)", "backend": "inductor is modelled"},
    "float8": {"filter_fqns": "layers kept in bf16 (the output layer): minor",
               "precompute_float8_dynamic_scale_for_fsdp": "one scale kernel per step instead of per layer",
               "emulate": "test emulation only"},
}  # fmt: skip
READ_KEYS = {
    "model": ("name", "flavor", "converters"),
    "optimizer": ("name", "implementation", "early_step_in_backward"),
    "training": ("local_batch_size", "global_batch_size", "seq_len", "dtype", "mixed_precision_param",
                 "enable_cpu_offload"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree"),
    "activation_checkpoint": ("mode", "selective_ac_option", "memory_budget"),
    "compile": ("enable",),
    "float8": ("recipe_name", "enable_fsdp_float8_all_gather"),
}  # fmt: skip
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "1f1b"}
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
OPTIMIZERS = {"AdamW": "adamw", "Adam": "adam"}
IMPLEMENTATIONS = {"fused": "fused", "foreach": "foreach", "for-loop": "single"}
# torchtitan's defaults at the pinned commit for the keys a step depends on, each with its line in
# torchtitan/config/job_config.py there (the dataclass field's default).
DEFAULTS: dict[str, Any] = {
    **{f"parallelism.{k}": v for k, v in (
        ("data_parallel_replicate_degree", 1),  # line 313
        ("data_parallel_shard_degree", -1),  # line 324
        ("fsdp_reshard_after_forward", "default"),  # line 336
        ("tensor_parallel_degree", 1),  # line 351
        ("enable_async_tensor_parallel", False),  # line 357
        ("pipeline_parallel_degree", 1),  # line 360
        ("pipeline_parallel_first_stage_less_layers", 1),  # line 377
        ("pipeline_parallel_last_stage_less_layers", 1),  # line 383
        ("pipeline_parallel_schedule", "1F1B"),  # line 396
        ("pipeline_parallel_microbatch_size", 1),  # line 412
        ("context_parallel_degree", 1),  # line 428
        ("expert_parallel_degree", 1),  # line 454
        ("expert_tensor_parallel_degree", 1))},  # line 464
    "model.converters": [],  # line 118
    "optimizer.name": "AdamW",  # line 135
    "optimizer.implementation": "fused",  # line 151
    "training.local_batch_size": 8,  # line 253
    "training.global_batch_size": -1,  # line 256: local_batch_size x the data-parallel degree
    "training.seq_len": 2048,  # line 261
    "training.enable_cpu_offload": False,  # line 270
    "training.dtype": "float32",  # line 275: fp32 parameters, mixed precision by the next key
    "training.mixed_precision_param": "bfloat16",  # line 282
    "activation_checkpoint.mode": "selective",  # line 652
    "activation_checkpoint.selective_ac_option": "2",  # line 655: every second block
    "compile.enable": False,  # line 722
    "float8.enable_fsdp_float8_all_gather": False,  # line 732 ([quantize.linear.float8])
    "float8.recipe_name": None,  # line 738: None is torchao Float8LinearConfig()'s tensorwise
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Doc:
    """The file's sections, each key checked against the tables above."""

    sections: Mapping[str, Mapping[str, Any]]

    def get(self, section: str, key: str) -> tuple[Any, str]:
        """(value, where it came from): the file's value, else torchtitan's default."""
        table = self.sections.get(section, {})
        if key in table:
            return table[key], f"[{section}] {key} = {_toml_value(table[key])}"
        default = DEFAULTS.get(f"{section}.{key}")
        return default, f"[{section}] {key} (torchtitan default {_toml_value(default)})"

    def has(self, section: str, key: str) -> bool:
        return key in self.sections.get(section, {})


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def _check(data: Mapping[str, Any]) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """The read sections by name (``[quantize.linear.float8]`` as ``float8``) and the ignored keys;
    an unknown section or key, or a value of the wrong type, is refused."""
    sections: dict[str, Mapping[str, Any]] = {}
    ignored: list[str] = []
    for name, table in data.items():
        if name in IGNORED_SECTIONS:
            ignored.append(f"[{name}]")
            continue
        if name == "quantize":
            table = _float8_of(table, ignored)
            if table is None:
                continue
            name = "float8"
        if name not in READ_KEYS or not isinstance(table, Mapping):
            raise refuse(NAME, f"[{name}]" if isinstance(table, Mapping) else name,
                         "unknown section (not read, and not on the list of sections ignored on purpose)")  # fmt: skip
        if name in sections:
            raise refuse(NAME, "[float8]", "given twice (as [float8] and [quantize.linear.float8])")
        for key in table:
            if key in IGNORED_KEYS.get(name, {}):
                ignored.append(f"[{name}] {key}")
            elif key not in READ_KEYS[name]:
                raise refuse(
                    NAME, f"[{name}] {key}", "unknown key (not read, and not on the list ignored on purpose)"
                )
        sections[name] = table
    return sections, ignored


def _float8_of(table: Any, ignored: list[str]) -> Mapping[str, Any] | None:
    """``[quantize.linear.float8]``; the other recipes' sections (MX, grouped-MM float8) are listed as
    ignored: they act only through a converter in ``[model] converters``, and any converter but
    float8 is refused there."""
    if not isinstance(table, Mapping) or not all(isinstance(v, Mapping) for v in table.values()):
        raise refuse(NAME, "[quantize]", "must hold tables such as [quantize.linear.float8]")
    for kind, recipes in table.items():
        for recipe in recipes:
            if (kind, recipe) != ("linear", "float8"):
                ignored.append(f"[quantize.{kind}.{recipe}] (no converter for it: it does nothing)")
    linear = table.get("linear", {})
    found = linear.get("float8")
    if found is not None and not isinstance(found, Mapping):
        raise refuse(NAME, "[quantize.linear.float8]", "must be a table")
    return found


def read_torchtitan(
    path_text: str, *, gpus: int | None = None, model_given: bool = False, model_name: str | None = None
) -> FrameworkConfig:
    """The settings of a torchtitan TOML file; ``gpus`` (the command's own ``--gpus``) resolves a
    ``data_parallel_shard_degree`` of -1 ("every GPU left"); with ``model_given`` (the command's own
    ``--model``, ``model_name`` when it names a preset) a flavor without a preset here is no error."""
    path = config_file(path_text, NAME, "job's .toml")
    text = read_text(path, "a torchtitan TOML file")
    sections, ignored = _check(parse_toml(text, f"--from {NAME} {path_text}"))
    doc = _Doc(sections)
    if "float8" in sections and not doc.get("model", "converters")[0]:
        ignored.append("[float8] (no float8 converter in [model] converters: it does nothing)")
    settings = [*_model(doc, model_given), *_layout(doc, gpus)]
    settings += [
        *_batch(doc, settings),
        *_precision(doc, settings, ignored),
        *_recompute(doc),
        *_optimizer(doc),
    ]
    if doc.get("compile", "enable")[0] is True:
        settings.append(Setting("compile", True, "[compile] enable = true"))
    # torchtitan's modules are eager PyTorch's (torch.nn, F.scaled_dot_product_attention) and its
    # loss is torch's cross entropy (torchtitan/components/loss.py, cross_entropy_loss)
    settings += [Setting("saved-tensors", "eager", "torchtitan's eager PyTorch modules"),
                 Setting("cross-entropy", "torch", "torchtitan's loss: torch.nn.functional.cross_entropy")]  # fmt: skip
    return FrameworkConfig(NAME, tuple(_resolve(settings, doc, gpus, model_name)), None, tuple(ignored))


def _resolve(settings: list[Setting], doc: _Doc, gpus: int | None, model_name: str | None) -> list[Setting]:
    """The settings that need the GPU count or the model's layers, in flag terms."""
    values = {s.flag: s.value for s in settings}
    total = int(values.get("gpus", gpus or 0))
    tp, pp, cp = (int(values.get(k, 1)) for k in ("tp", "pp", "cp"))
    local = _int(doc, "training", "local_batch_size")[0]
    dp = total // (tp * pp * cp)
    if "global-batch" in values and int(values["global-batch"]) % (local * dp):
        raise refuse(NAME, "[training] global_batch_size",
                     f"{values['global-batch']} is not a multiple of local_batch_size {local} x data-parallel {dp}")  # fmt: skip
    out: list[Setting] = []
    for s in settings:
        if s.flag == "local-batch":  # global_batch_size -1: local batch x data-parallel degree
            s = Setting("global-batch", str(int(s.value) * (total // (tp * pp * cp))), s.source)
        elif s.flag == "pp-split":
            per_rank, sizes = _split(doc, _layers(values, model_name), pp, str(s.value))
            if per_rank > 1:
                out.append(Setting("vpp", str(per_rank), s.source))
            if len(set(sizes)) > 1:
                out.append(Setting("pp-layers", ",".join(map(str, sizes)), s.source))
            continue
        out.append(s)
    return out


def _layers(values: Mapping[str, Any], model_name: str | None) -> int:
    name = values.get("model", model_name)
    entry = _preset_table().get(str(name)) if name is not None else None
    if entry is None or entry["family"] != "transformer":
        raise refuse(NAME, "[parallelism] pipeline_parallel_degree",
                     "the stage split needs the model's layer count: [model] name and flavor, or a preset --model")  # fmt: skip
    return int(entry["shape"]["layers"])


# torchtitan's schedules that run one stage per rank (torch.distributed.pipelining PipelineScheduleSingle)
SINGLE_STAGE = ("1F1B", "GPipe")


def _split(doc: _Doc, layers: int, pp: int, schedule: str) -> tuple[int, list[int]]:
    """(virtual stages per rank, blocks per virtual stage in order) as torchtitan splits a model:
    pipeline_llm in torchtitan/distributed/pipeline_parallel.py (lines 59-121 at the pinned commit:
    ceil((layers + first + last) / layers_per_stage) stages, else 1 per rank for a single-stage
    schedule and 2 for a multi-stage one) and its generate_llm_fqn_per_model_part (lines 236-344:
    the embedding and the loss weigh ``*_less_layers`` blocks, the remainder goes to the first stages)."""
    first = _int(doc, "parallelism", "pipeline_parallel_first_stage_less_layers", low=0)[0]
    last = _int(doc, "parallelism", "pipeline_parallel_last_stage_less_layers", low=0)[0]
    key = "[parallelism] pipeline_parallel_layers_per_stage"
    lps = doc.get("parallelism", "pipeline_parallel_layers_per_stage")[0]
    single = schedule in SINGLE_STAGE
    if lps is None:
        per_rank = 1 if single else 2
    else:
        if isinstance(lps, bool) or not isinstance(lps, int) or not 1 <= lps <= 2**20:
            raise refuse(NAME, key, f"{lps!r} is not a positive whole number")
        stages = -(-(layers + first + last) // lps)
        if stages % pp or (single and stages != pp) or (not single and stages < 2 * pp):
            need = "one stage per rank" if single else "at least 2 stages per rank"
            raise refuse(
                NAME,
                key,
                f"{lps} makes {stages} stages of {layers} layers for pp {pp}; {schedule} needs {need}",
            )
        per_rank = stages // pp
    stages = pp * per_rank
    effective = layers + first + last
    per, extra = divmod(effective, stages)
    if per == 0 or first > per or last > per:
        raise refuse(NAME, "[parallelism] pipeline_parallel_first_stage_less_layers",
                     f"{layers} layers + {first} + {last} do not split into {stages} stages (torchtitan refuses it)")  # fmt: skip
    sizes = [
        per + (i < extra) - (first if i == 0 else 0) - (last if i == stages - 1 else 0) for i in range(stages)
    ]
    if min(sizes) < 1:
        raise refuse(NAME, "[parallelism] pipeline_parallel_first_stage_less_layers",
                     f"a stage of {layers} layers over {stages} stages would hold no block: {sizes}")  # fmt: skip
    return per_rank, sizes


def _int(doc: _Doc, section: str, key: str, *, low: int = 1) -> tuple[int, str]:
    value, source = doc.get(section, key)
    if low == 0 and value is None:
        value = 1  # torchtitan's default for the *_less_layers keys
    if isinstance(value, bool) or not isinstance(value, int) or value < low or value > 2**30:
        allowed = "-1 or a positive whole number" if low == -1 else "a positive whole number"
        raise refuse(NAME, f"[{section}] {key}", f"{value!r} is not {allowed}")
    if low == -1 and value == 0:
        raise refuse(NAME, f"[{section}] {key}", "0 is not -1 or a positive whole number")
    return value, source


def _choice(
    doc: _Doc, section: str, key: str, allowed: Mapping[str, Any] | tuple[str, ...]
) -> tuple[Any, str]:
    value, source = doc.get(section, key)
    if not isinstance(value, str) or value not in allowed:
        raise refuse(NAME, f"[{section}] {key}", f"{value!r} is not one of {', '.join(allowed)}")
    return value, source


def _model(doc: _Doc, model_given: bool) -> list[Setting]:
    if not doc.has("model", "name") and not doc.has("model", "flavor"):
        return []
    name, _ = doc.get("model", "name")
    flavor, _ = doc.get("model", "flavor")
    preset = MODELS.get((name, flavor))
    if preset is None and model_given:
        return []  # the command's --model stands (it would override the preset anyway)
    if preset is None:
        known = ", ".join(f"{n} {f}" for n, f in MODELS)
        raise refuse(
            NAME,
            "[model] name/flavor",
            f"{name!r} {flavor!r} has no preset here (known: {known}); give --model, e.g. its config.json",
        )
    return [Setting("model", preset, f'[model] name = "{name}", flavor = "{flavor}"')]


def _degrees(doc: _Doc) -> dict[str, tuple[int, str]]:
    keys = {"replicate": "data_parallel_replicate_degree", "tp": "tensor_parallel_degree",
            "pp": "pipeline_parallel_degree", "cp": "context_parallel_degree", "ep": "expert_parallel_degree"}  # fmt: skip
    degrees = {name: _int(doc, "parallelism", key) for name, key in keys.items()}
    degrees["shard"] = _int(doc, "parallelism", "data_parallel_shard_degree", low=-1)
    return degrees


def _layout(doc: _Doc, gpus: int | None) -> list[Setting]:
    d = _degrees(doc)
    etp, _ = _int(doc, "parallelism", "expert_tensor_parallel_degree")
    if etp != 1:
        raise refuse(NAME, "[parallelism] expert_tensor_parallel_degree", f"{etp}: only 1 is modelled")
    for key in ("module_fqns_per_model_part", "pipeline_parallel_schedule_csv"):
        if doc.get("parallelism", key)[0]:
            raise refuse(
                NAME, f"[parallelism] {key}", "a hand-made pipeline split is not read; use the degree"
            )
    shard, shard_source = d["shard"]
    model = d["replicate"][0] * d["tp"][0] * d["pp"][0] * d["cp"][0]
    out: list[Setting] = []
    if shard == -1:
        if gpus is None:
            raise refuse(
                NAME,
                "[parallelism] data_parallel_shard_degree",
                "-1 (every GPU left) needs one GPU count, --gpus N",
            )
        if gpus % model:
            raise refuse(NAME, "[parallelism] data_parallel_shard_degree",
                         f"-1 with --gpus {gpus}: not a multiple of replicate x tp x pp x cp = {model}")  # fmt: skip
        shard = gpus // model
    else:
        out.append(Setting("gpus", str(shard * model), f"{shard_source} x the other degrees"))
    replicate = d["replicate"][0]
    strategy = "hsdp" if replicate > 1 and shard > 1 else "ddp" if replicate > 1 else "fsdp"
    note = " (HSDP here shards within a node)" if strategy == "hsdp" else ""
    out.append(Setting("strategies", strategy, f"{shard_source}, {d['replicate'][1]}{note}"))
    out += [Setting(k, str(d[k][0]), d[k][1]) for k in ("tp", "pp", "cp", "ep")]
    if d["cp"][0] > 1:  # torch's context_parallel merges ring attention's steps in unfused fp32 ops
        out.append(Setting("ring-merge", "eager", d["cp"][1] + " (torch context_parallel's ring attention)"))
        # torchtitan's llama calls repeat_kv on keys and values before SDPA: its ring moves every head
        out.append(Setting("ring-kv", "repeated", d["cp"][1] + " (torchtitan's llama repeats kv heads)"))
    if d["tp"][0] > 1:  # torchtitan's TP plan shards the norms' activations: sequence parallelism
        out.append(Setting("sequence-parallel", True, d["tp"][1] + " (torchtitan's TP is sequence-parallel)"))
    out += _pipeline(doc, d["pp"][0])
    reshard, source = doc.get("parallelism", "fsdp_reshard_after_forward")
    # "default" is "never" with a pipeline (models/llama3/infra/parallelize.py, apply_fsdp: "to avoid
    # per-microbatch all-gathers"), "always" without one
    if reshard == "never" or (reshard == "default" and d["pp"][0] > 1 and strategy != "ddp"):
        out.append(
            Setting(
                "no-reshard-after-forward",
                True,
                source + (" with a pipeline" if reshard == "default" else ""),
            )
        )
    elif reshard not in ("default", "always"):
        raise refuse(
            NAME, "[parallelism] fsdp_reshard_after_forward", f"{reshard!r} is not default, always or never"
        )
    overlap, source = doc.get("parallelism", "enable_async_tensor_parallel")
    if overlap is True and d["tp"][0] > 1:  # torchtitan applies it with tensor parallelism only
        compiled, components = doc.get("compile", "enable")[0], doc.get("compile", "components")[0]
        if compiled is not True or (isinstance(components, list) and "model" not in components):
            # torchtitan/distributed/tensor_parallel.py, maybe_enable_async_tp: a RuntimeError
            raise refuse(NAME, "[parallelism] enable_async_tensor_parallel",
                         "async TP needs [compile] enable = true with \"model\" in components (torchtitan refuses it)")  # fmt: skip
        out.append(Setting("tp-comm-overlap", True, source))
    return out


def _pipeline(doc: _Doc, pp: int) -> list[Setting]:
    schedule, source = _choice(doc, "parallelism", "pipeline_parallel_schedule", SCHEDULES)
    if pp == 1:
        return []
    keys = [k for k in ("pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                        "pipeline_parallel_last_stage_less_layers") if doc.has("parallelism", k)]  # fmt: skip
    split = ", ".join(doc.get("parallelism", k)[1] for k in keys) or (
        "torchtitan's default split (first/last_stage_less_layers 1)"
    )
    return [Setting("schedule", SCHEDULES[schedule], source), Setting("pp-split", schedule, split)]


def _batch(doc: _Doc, settings: list[Setting]) -> list[Setting]:
    local, local_source = _int(doc, "training", "local_batch_size")
    global_batch, global_source = doc.get("training", "global_batch_size")
    pp = next((int(s.value) for s in settings if s.flag == "pp"), 1)
    out = [Setting("seq-len", str(_int(doc, "training", "seq_len")[0]), _int(doc, "training", "seq_len")[1])]
    if pp > 1:
        micro, source = _int(doc, "parallelism", "pipeline_parallel_microbatch_size")
        if local % micro:
            raise refuse(NAME, "[parallelism] pipeline_parallel_microbatch_size",
                         f"{micro} does not divide [training] local_batch_size {local}")  # fmt: skip
        out.append(Setting("micro-batch", str(micro), source))
    else:
        out.append(Setting("micro-batch", str(local), local_source))
    if global_batch != -1:
        value, _ = _int(doc, "training", "global_batch_size")
        out.append(Setting("global-batch", str(value), global_source))
    else:
        out.append(Setting("local-batch", str(local), f"{local_source} x the data-parallel degree"))
    return out


def _float8_gather(doc: _Doc, recipe: str, strategy: str | bool, ignored: list[str]) -> None:
    """torchao's FP8 all-gather: rowwise cannot (torchao's Float8LinearConfig refuses it); the model
    prices tensorwise with it (simcore/data/fp8.yaml), so a tensorwise FSDP run without it is named."""
    gather, source = doc.get("float8", "enable_fsdp_float8_all_gather")
    if gather is True and recipe == "rowwise":
        raise refuse(NAME, "[float8] enable_fsdp_float8_all_gather",
                     "true contradicts recipe_name rowwise (torchao gathers rowwise weights in bf16)")  # fmt: skip
    if gather is not True and recipe == "tensorwise" and strategy in ("fsdp", "hsdp"):
        ignored.append(f"{source}: priced as true (tensorwise is modelled with the FP8 all-gather)")


def _dtype(doc: _Doc, strategy: str | bool) -> list[Setting]:
    param, source = _choice(doc, "training", "mixed_precision_param", ("bfloat16", "float32"))
    dtype, _ = _choice(doc, "training", "dtype", ("bfloat16", "float32"))
    if dtype == "bfloat16" and param == "float32":
        raise refuse(NAME, "[training] dtype", "bfloat16 contradicts mixed_precision_param float32")
    if dtype == "bfloat16":  # parameters themselves in bf16: no fp32 master copy
        return [Setting("dtype", "bf16", "[training] dtype = \"bfloat16\""),
                Setting("precision", "pure", "[training] dtype = \"bfloat16\"")]  # fmt: skip
    out = [Setting("dtype", "bf16" if param == "bfloat16" else "fp32", source)]
    if param == "bfloat16" and strategy != "ddp":  # FSDP2 MixedPrecisionPolicy(param bf16, reduce fp32)
        out.append(Setting("precision", "fsdp-mp", source))
    return out


def _precision(doc: _Doc, settings: list[Setting], ignored: list[str]) -> list[Setting]:
    strategy = next(s.value for s in settings if s.flag == "strategies")
    out = _dtype(doc, strategy)
    converters, conv_source = doc.get("model", "converters")
    converters = converters or []
    if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
        raise refuse(NAME, "[model] converters", "must be a list of names")
    unknown = [c for c in converters if c not in FLOAT8_CONVERTERS]
    if unknown:
        raise refuse(
            NAME,
            "[model] converters",
            f"{unknown[0]!r} is not modelled; read: {', '.join(FLOAT8_CONVERTERS)}",
        )
    if converters:
        recipe, _ = doc.get("float8", "recipe_name")
        recipe = recipe or "tensorwise"  # torchao Float8LinearConfig's default: tensorwise scaling
        if recipe not in ("tensorwise", "rowwise"):
            raise refuse(
                NAME, "[float8] recipe_name", f"{recipe!r} is not modelled; allowed: tensorwise, rowwise"
            )
        out.append(Setting("fp8", recipe, f'{conv_source}, [float8] recipe_name = "{recipe}"'))
        _float8_gather(doc, recipe, strategy, ignored)
    if doc.get("training", "enable_cpu_offload")[0] is True:  # FSDP2 CPUOffloadPolicy: params, grads, states
        out.append(Setting("offload", "params", "[training] enable_cpu_offload = true"))
    else:
        out.append(Setting("offload", "none", "[training] enable_cpu_offload (torchtitan default false)"))
    return out


def _recompute(doc: _Doc) -> list[Setting]:
    mode, source = _choice(
        doc, "activation_checkpoint", "mode", ("none", "selective", "full", "memory_budget")
    )
    if mode == "memory_budget":
        raise refuse(
            NAME, "[activation_checkpoint] mode", "memory_budget (a compiler choice) is not modelled"
        )
    if mode != "selective":
        return [Setting("recompute", mode, source)]
    option, option_source = doc.get("activation_checkpoint", "selective_ac_option")
    if option == "op":
        return [Setting("recompute", "selective-op", f"{source}, {option_source}")]
    if not isinstance(option, str) or not option.isdigit() or int(option) < 1:
        raise refuse(
            NAME,
            "[activation_checkpoint] selective_ac_option",
            f"{option!r} is not 'op' or a positive number",
        )
    # "ac every positive int layer": every N-th block recomputed (N = 1: all of them)
    value = "full" if int(option) == 1 else f"every-{int(option)}"
    return [Setting("recompute", value, f"{source}, {option_source}")]


def _optimizer(doc: _Doc) -> list[Setting]:
    out: list[Setting] = []
    if doc.get("optimizer", "early_step_in_backward")[0] is True:
        raise refuse(
            NAME, "[optimizer] early_step_in_backward", "is not modelled (the step runs after backward)"
        )
    name, source = _choice(doc, "optimizer", "name", OPTIMIZERS)
    out.append(Setting("optimizer", OPTIMIZERS[name], source))
    impl, source = _choice(doc, "optimizer", "implementation", IMPLEMENTATIONS)
    out.append(Setting("optimizer-impl", IMPLEMENTATIONS[impl], source))
    return out
