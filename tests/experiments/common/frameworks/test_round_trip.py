"""Emit then read: a plan's layout written as a Megatron line, a torchtitan TOML or a DeepSpeed JSON
and read back with ``--from`` gives the same layout and settings (hypothesis over layouts each
framework can run), and a layout a framework cannot run is not written for it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.common.frameworks.deepspeed import emit_deepspeed, read_deepspeed
from experiments.common.frameworks.megatron import emit_megatron, read_megatron
from experiments.common.frameworks.torchtitan import emit_torchtitan, read_torchtitan
from simcore.workload.loader import _preset_table

ROUND_TRIP = settings(max_examples=40, deadline=None)


@st.composite
def layouts(draw: st.DrawFn, framework: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(layout record as the plan writes it, the run's model and batch) that ``framework`` can run."""
    model_parallel = framework != "deepspeed"
    tp, pp, cp, ep = (draw(st.sampled_from((1, 2, 4))) if model_parallel else 1 for _ in range(4))
    strategies = {"megatron": ("ddp", "zero1", "fsdp"), "torchtitan": ("fsdp", "ddp", "hsdp"),
                  "deepspeed": ("ddp", "zero1", "zero2", "zero3")}[framework]  # fmt: skip
    strategy = draw(st.sampled_from(strategies))
    recompute = draw(st.sampled_from({"megatron": ("none", "selective", "full"), "torchtitan": ("none", "full", "every-2"),
                                      "deepspeed": ("none", "full")}[framework]))  # fmt: skip
    offloads = {"megatron": ("none", "optimizer"), "torchtitan": ("none", "params"),
                "deepspeed": ("none", "optimizer") + (("params",) if strategy == "zero3" else ())}[framework]  # fmt: skip
    dp = draw(st.sampled_from((2, 4, 8) if strategy != "hsdp" else (16, 32)))
    micro = draw(st.integers(1, 4))
    model = draw(
        st.sampled_from(
            ("llama3-8b", "llama3-70b") + (("llama2-7b", "gpt2-small") if framework == "megatron" else ())
        )
    )
    layers = _preset_table()[model]["shape"]["layers"]
    vpp = draw(st.sampled_from([v for v in (1, 2, 3) if layers % (pp * v) == 0])) if pp > 1 else 1
    layout = {"strategy": strategy, "micro_batch": micro, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep,
              "vpp": vpp, "schedule": "1f1b", "recompute": recompute, "offload": draw(st.sampled_from(offloads)),
              "sequence_parallel": tp > 1 and (framework == "torchtitan" or draw(st.booleans()))}  # fmt: skip
    run = {"model": model, "shape": dict(_preset_table()[model]["shape"]), "seq_len": draw(st.sampled_from((1024, 4096))),
           "global_batch": micro * dp * draw(st.integers(1, 3)) * (pp if pp > 1 else 1),
           "dtype": draw(st.sampled_from(("bf16", "fp16") if framework != "torchtitan" else ("bf16", "fp32"))),
           "optimizer": draw(st.sampled_from(("adamw", "sgd-momentum") if framework == "megatron" else ("adamw", "adam"))),
           "hsdp_replicas": dp // 8 if strategy == "hsdp" else 1}  # fmt: skip
    return layout, run


def expected(layout: dict[str, Any], run: dict[str, Any], *, degrees: bool = True) -> dict[str, Any]:
    want = {"model": run["model"], "strategies": layout["strategy"], "micro-batch": str(layout["micro_batch"]),
            "global-batch": str(run["global_batch"]), "recompute": layout["recompute"], "offload": layout["offload"],
            "dtype": run["dtype"], "optimizer": run["optimizer"]}  # fmt: skip
    if degrees:
        want |= {k: str(layout[k]) for k in ("tp", "pp", "cp", "ep")}
    if layout["vpp"] > 1:
        want["vpp"] = str(layout["vpp"])
    return want


def read_back(got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    return {k: got.get(k) for k in want}


@ROUND_TRIP
@given(layouts("megatron"))
def test_megatron_line_reads_back_as_the_same_layout(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    layout, run = case
    line = emit_megatron(layout, run)
    assert line is not None
    config = read_megatron(line)
    got = {s.flag: s.value for s in config.settings}
    want = expected(layout, run) | {"seq-len": str(run["seq_len"])}
    assert read_back(got, want) == want
    assert got.get("sequence-parallel", False) is layout["sequence_parallel"]
    assert config.shape is None  # the preset's shape, recognised


@ROUND_TRIP
@given(case=layouts("torchtitan"))
def test_torchtitan_toml_reads_back_as_the_same_layout(
    case: tuple[dict[str, Any], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    layout, run = case
    text = emit_torchtitan(layout, run)
    assert text is not None
    path = tmp_path_factory.mktemp("tt") / "job.toml"
    path.write_text(text, encoding="utf-8")
    got = {s.flag: s.value for s in read_torchtitan(str(path)).settings}
    want = expected(layout, run) | {"seq-len": str(run["seq_len"])}
    assert read_back(got, want) == want
    assert got["gpus"] == str(layout["dp"] * layout["tp"] * layout["pp"] * layout["cp"])


@ROUND_TRIP
@given(case=layouts("deepspeed"))
def test_deepspeed_json_reads_back_as_the_same_layout(
    case: tuple[dict[str, Any], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    layout, run = case
    text = emit_deepspeed(layout, run)
    assert text is not None
    path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_text(text, encoding="utf-8")
    got = {s.flag: s.value for s in read_deepspeed(str(path)).settings}
    want = expected(layout, run)
    want.pop("model")  # a DeepSpeed JSON names no model
    assert read_back(got, want) == want
    assert got["gpus"] == str(layout["dp"])


BASE = {"strategy": "zero1", "micro_batch": 1, "dp": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1,
        "schedule": "1f1b", "recompute": "none", "offload": "none", "sequence_parallel": False}  # fmt: skip
RUN = {"model": "llama3-8b", "shape": dict(_preset_table()["llama3-8b"]["shape"]), "seq_len": 4096,
       "global_batch": 64, "dtype": "bf16", "optimizer": "adamw", "hsdp_replicas": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("emit", "change"),
    [
        (emit_megatron, {"strategy": "zero2"}),  # Megatron has no ZeRO-2
        (emit_megatron, {"pp": 2, "schedule": "zb-h1"}),  # nor zero-bubble schedules
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
