"""Emit then read: a plan's layout written as a Megatron line, a torchtitan TOML or a DeepSpeed JSON
and read back with ``--from`` sets every lever as the plan priced it (hypothesis over the planner's
space: strategy, degrees, virtual stages, schedule, sequence parallelism, TP overlap, recompute,
offload, micro/global batch, dtype and FP8 recipe, master weights, optimizer, compile, saved tensors,
cross entropy, ZeRO buckets, overlap and ZeRO-3 fetch tuning), except exactly the levers the emitter names in a ``# cannot express`` line; and a
layout a framework cannot run at all is not written for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.common.frameworks.deepspeed import emit_deepspeed, read_deepspeed
from experiments.common.frameworks.emit import EMITTERS
from experiments.common.frameworks.levers import LEVERS, Emitted, plan_levers, read_levers
from experiments.common.frameworks.megatron import read_megatron
from experiments.common.frameworks.megatron_emit import emit_megatron
from experiments.common.frameworks.settings import FrameworkConfig
from experiments.common.frameworks.torchtitan import read_torchtitan
from experiments.common.frameworks.torchtitan_emit import emit_torchtitan
from simcore.workload.loader import _preset_table

ROUND_TRIP = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
MODELS = ("llama3-8b", "llama3-70b", "llama2-7b", "gpt2-small")


@st.composite
def plans(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(layout record as the plan writes it, the run's model, batch and levers), drawn from the
    planner's space (simcore.planner.space: pipelines with DDP or ZeRO-1, TP overlap with sequence
    parallelism only), not from what any one framework can run."""
    tp, pp, cp = (draw(st.sampled_from((1, 2, 4))) for _ in range(3))
    strategy = draw(
        st.sampled_from(("ddp", "zero1") if pp > 1 else ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"))
    )
    model = draw(st.sampled_from(MODELS))
    layers = _preset_table()[model]["shape"]["layers"]
    if layers % pp:
        pp = 1
    vpp = draw(st.sampled_from([v for v in (1, 2, 4) if layers % (pp * v) == 0])) if pp > 1 else 1
    dp = draw(st.sampled_from((2, 4, 8) if strategy != "hsdp" else (16, 32)))
    micro = draw(st.integers(1, 4))
    sequence_parallel = tp > 1 and draw(st.booleans())
    layout = {"strategy": strategy, "micro_batch": micro, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": 1, "vpp": vpp,
              "schedule": draw(st.sampled_from(("1f1b", "zb-h1", "gpipe"))) if pp > 1 else "1f1b",
              "sequence_parallel": sequence_parallel, "tp_comm_overlap": sequence_parallel and draw(st.booleans()),
              "recompute": draw(st.sampled_from(("none", "selective", "selective-op", "full", "every-2"))),
              "offload": draw(st.sampled_from(("none", "optimizer", "params", "activations")))}  # fmt: skip
    dtype = draw(st.sampled_from(("bf16", "fp16", "fp32", "fp8")))
    run = {"model": model, "shape": dict(_preset_table()[model]["shape"]), "seq_len": draw(st.sampled_from((1024, 4096))),
           "global_batch": micro * dp * draw(st.integers(1, 3)) * pp, "dtype": dtype,
           "fp8": draw(st.sampled_from(("none", "tensorwise", "rowwise", "delayed"))) if dtype == "bf16" else "none",
           "optimizer": draw(st.sampled_from(("adamw", "adam", "sgd-momentum", "sgd"))),
           "optimizer_impl": draw(st.sampled_from(("auto", "foreach", "fused"))),
           "master_weights": draw(st.booleans()), "compile": draw(st.booleans()),
           "saved_tensors": draw(st.sampled_from(("eager", "megatron-te"))),
           "cross_entropy": draw(st.sampled_from(("torch", "megatron"))),
           "ring_kv": draw(st.sampled_from(("grouped", "repeated"))),
           "ring_merge": draw(st.sampled_from(("fused", "eager"))),
           "zero_bucket_size": draw(st.sampled_from((None, 500_000_000, 25_000_000))),
           "zero_allgather_bucket_size": draw(st.sampled_from((None, 50_000_000))),
           "zero_overlap_comm": draw(st.sampled_from((None, "on", "off"))),
           "zero3_prefetch_bucket_size": draw(st.sampled_from((None, 20_000_000))),
           "zero3_max_live_parameters": draw(st.sampled_from((None, 300_000_000))),
           "zero3_max_reuse_distance": draw(st.sampled_from((None, 1_000_000_000))),
           "hsdp_replicas": dp // 8 if strategy == "hsdp" else 1}  # fmt: skip
    return layout, run


def runnable(framework: str, layout: dict[str, Any]) -> bool:
    """Whether the framework runs the layout at all (its strategies, schedules, recompute kinds and
    offloads; written out here, apart from the emitters)."""
    pipelined = layout["pp"] > 1
    if framework == "megatron":
        return (layout["strategy"] in ("ddp", "zero1", "fsdp") and layout["offload"] in ("none", "optimizer", "activations")
                and layout["recompute"] in ("none", "selective", "full") and (not pipelined or layout["schedule"] == "1f1b"))  # fmt: skip
    if framework == "torchtitan":
        return (layout["strategy"] in ("ddp", "fsdp", "hsdp") and layout["offload"] in ("none", "params")
                and layout["recompute"] != "selective" and (not pipelined or layout["schedule"] == "1f1b" or (layout["schedule"], layout["vpp"]) == ("gpipe", 1)))  # fmt: skip
    return (layout["strategy"] in ("ddp", "zero1", "zero2", "zero3") and layout["tp"] == layout["pp"] == layout["cp"] == 1
            and layout["recompute"] in ("none", "full")
            and (layout["offload"] in ("none", "optimizer") or (layout["offload"], layout["strategy"]) == ("params", "zero3")))  # fmt: skip


def read_back(framework: str, emitted: Emitted, folder: Path, model: str) -> FrameworkConfig:
    if framework == "megatron":
        return read_megatron("\n".join([*emitted.notes(), emitted.text]))  # the file as written
    path = folder / ("job.toml" if framework == "torchtitan" else "ds.json")
    notes = emitted.notes() if framework == "torchtitan" else []
    path.write_text("\n".join([*notes, emitted.text]), encoding="utf-8")
    if framework == "torchtitan":
        return read_torchtitan(str(path), model_given=True, model_name=model)  # the command's --model
    return read_deepspeed(str(path))


@ROUND_TRIP
@given(case=plans(), framework=st.sampled_from(sorted(EMITTERS)))
def test_every_lever_reads_back_as_the_plan_priced_it_or_is_named(
    case: tuple[dict[str, Any], dict[str, Any]], framework: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    layout, run = case
    emitted = EMITTERS[framework](layout, run)
    assert (emitted is not None) == runnable(framework, layout), layout
    if emitted is None:
        return
    config = read_back(framework, emitted, tmp_path_factory.mktemp(framework), run["model"])
    want = plan_levers(layout, run)
    got = read_levers(config, model=run["model"])
    differ = {lever for lever in LEVERS if got[lever] != want[lever]}
    named = {lever for lever, _ in emitted.cannot}
    assert differ == named, {lever: (want[lever], got[lever]) for lever in differ | named}
    if framework != "deepspeed":  # a DeepSpeed JSON holds no model and no model parallelism
        assert got["model"] == run["model"]
    assert {s.flag for s in config.settings} >= {
        "strategies",
        "micro-batch",
        "global-batch",
        "recompute",
        "dtype",
    }


def test_a_lever_the_framework_runs_otherwise_is_named_on_a_comment_line() -> None:
    """Hand-picked: torchtitan has no Megatron-TE kernels and compiles for async TP; Megatron has no
    rowwise FP8 and no torch.compile; a DeepSpeed JSON holds no FP8 (the model's)."""
    layout = BASE | {"strategy": "fsdp", "tp": 2, "sequence_parallel": True, "tp_comm_overlap": True}
    run = RUN | {"saved_tensors": "megatron-te"}
    emitted = emit_torchtitan(layout, run)
    assert emitted is not None
    assert {lever for lever, _ in emitted.cannot} == {"saved-tensors", "compile"}
    assert (
        "enable_async_tensor_parallel = true" in emitted.text and "[compile]\nenable = true" in emitted.text
    )
    emitted = emit_megatron(BASE, RUN | {"fp8": "rowwise", "compile": True, "cross_entropy": "megatron"})
    assert emitted is not None and {lever for lever, _ in emitted.cannot} == {"fp8", "compile"}
    assert emitted.notes()[0].startswith("# cannot express --fp8: rowwise")
    emitted = emit_deepspeed(BASE, RUN | {"fp8": "tensorwise"})
    assert emitted is not None and [lever for lever, _ in emitted.cannot] == ["fp8", "seq-len"]


def test_megatron_line_writes_fp8_te_overlap_and_selective_recompute() -> None:
    layout = BASE | {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": True, "recompute": "selective"}
    emitted = emit_megatron(
        layout, RUN | {"dtype": "fp8", "saved_tensors": "megatron-te", "cross_entropy": "megatron"}
    )
    assert emitted is not None and emitted.cannot == ()
    for part in ("--transformer-impl transformer_engine", "--fp8-format hybrid --fp8-recipe delayed",
                 "--tp-comm-overlap", "--sequence-parallel", "--recompute-granularity selective", "--bf16"):  # fmt: skip
        assert part in emitted.text


BASE = {"strategy": "zero1", "micro_batch": 1, "dp": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1,
        "schedule": "1f1b", "recompute": "none", "offload": "none", "sequence_parallel": False,
        "tp_comm_overlap": False}  # fmt: skip
RUN = {"model": "llama3-8b", "shape": dict(_preset_table()["llama3-8b"]["shape"]), "seq_len": 4096,
       "global_batch": 64, "dtype": "bf16", "fp8": "none", "optimizer": "adamw", "master_weights": True,
       "compile": False, "saved_tensors": "eager", "cross_entropy": "torch", "hsdp_replicas": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("emit", "change"),
    [
        (emit_megatron, {"strategy": "zero2"}),  # Megatron has no ZeRO-2
        (emit_megatron, {"pp": 2, "schedule": "zb-h1"}),  # nor zero-bubble schedules
        (emit_megatron, {"recompute": "selective-op"}),  # nor torchtitan's per-op policy
        (emit_torchtitan, {"strategy": "zero1"}),  # torchtitan shards with FSDP2 only
        (emit_torchtitan, {"recompute": "selective"}),  # Megatron's selective recompute
        (emit_deepspeed, {"tp": 2}),  # a DeepSpeed JSON has no tensor parallelism
        (emit_deepspeed, {"strategy": "fsdp"}),
    ],
)
def test_a_layout_the_framework_cannot_run_is_not_written(emit: Any, change: dict[str, Any]) -> None:
    base = BASE | ({"strategy": "fsdp"} if emit is emit_torchtitan else {})  # torchtitan shards with FSDP2
    assert emit(base, RUN) is not None
    assert emit(base | change, RUN) is None


def _what_if(argv: list[str]) -> tuple[Any, ...]:
    """The what-if's TrainingConfig (precision aside: compared resolved above), run options and
    layout flags for ``argv``, a ``--from`` in it expanded as the command expands it."""
    from dataclasses import asdict

    from experiments.common.frameworks.wiring import expand_from
    from experiments.what_if.layouts import parallel_options
    from experiments.what_if.plain import _config, build_parser
    from simcore.compute.heterogeneity import Heterogeneity

    parser = build_parser()
    expanded, _ = expand_from(parser, argv, "what_if")
    args = parser.parse_args(expanded)
    config = _config(args, Heterogeneity.from_strings(args.straggler, args.jitter))
    degrees = (*(getattr(args, k) for k in ("model", "strategies", "tp", "pp", "cp", "ep", "pp_layers")),
               args.vpp or "1")  # fmt: skip
    fields = {k: v for k, v in asdict(config).items() if k != "precision"}
    return fields, parallel_options(args), degrees


def _flags(levers: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for lever, value in levers.items():
        if lever == "precision" or value is None or value is False:
            continue
        argv += [f"--{lever}"] if value is True else [f"--{lever}", str(value)]
    return argv


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=plans(), framework=st.sampled_from(("megatron", "torchtitan")))
def test_the_what_if_runs_a_config_read_back_as_its_levers_say(
    case: tuple[dict[str, Any], dict[str, Any]], framework: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``--from X FILE`` and the read-back levers given as flags build the same TrainingConfig, run
    options and layout: the levers' defaults are the what-if's own (model-parallel layouts: a
    data-parallel one takes the what-if's data-parallel flags instead)."""
    layout, run = case
    emitted = EMITTERS[framework](layout, run)
    if emitted is None or layout["tp"] == layout["pp"] == layout["cp"] == 1:
        return
    folder = tmp_path_factory.mktemp(framework)
    path = folder / ("job.args" if framework == "megatron" else "job.toml")
    path.write_text("\n".join([*emitted.notes(), emitted.text]), encoding="utf-8")
    config = read_back(framework, emitted, folder, run["model"])
    model = [] if framework == "megatron" else ["--model", run["model"]]
    got = _what_if(["--from", framework, str(path), *model])
    assert got == _what_if(_flags(read_levers(config, model=run["model"]))), emitted.text


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_a_deepspeed_sgd_runs_optimizer_implementation_is_named_when_the_json_cannot_say_it(
    impl: str, tmp_path: Path
) -> None:
    """DeepSpeed's JSON names the optimizer type, not its implementation: an SGD plan priced with
    an implementation other than what reading the JSON back means (--optimizer-impl auto) is named."""
    model = MODELS[0]
    layout = {"strategy": "zero1", "micro_batch": 1, "dp": 2, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1,
              "schedule": "1f1b", "sequence_parallel": False, "tp_comm_overlap": False, "recompute": "none",
              "offload": "none"}  # fmt: skip
    run = {"model": model, "shape": dict(_preset_table()[model]["shape"]), "seq_len": 1024, "global_batch": 2,
           "dtype": "bf16", "fp8": "none", "optimizer": "sgd", "optimizer_impl": impl, "master_weights": True,
           "compile": False, "saved_tensors": "eager", "cross_entropy": "torch", "ring_kv": "grouped",
           "ring_merge": "fused", "zero_bucket_size": None, "zero_allgather_bucket_size": None,
           "zero_overlap_comm": None, "zero3_prefetch_bucket_size": None, "zero3_max_live_parameters": None,
           "zero3_max_reuse_distance": None, "hsdp_replicas": 1}  # fmt: skip
    emitted = emit_deepspeed(layout, run)
    assert emitted is not None
    got = read_levers(read_back("deepspeed", emitted, tmp_path, model), model=model)
    differs = got["optimizer-impl"] != plan_levers(layout, run)["optimizer-impl"]
    assert differs == ("optimizer-impl" in {lever for lever, _ in emitted.cannot})
    assert differs == (impl == "foreach")  # zero1's auto is DeepSpeed's fused
