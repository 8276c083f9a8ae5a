"""``plan --emit megatron|torchtitan|deepspeed``: each GPU count's best layout in the framework's terms.

Per GPU count, the best-ranked layout the framework can run is printed (a Megatron argument
line, a torchtitan TOML fragment or a DeepSpeed JSON), after a ``#`` line naming the count, the
layout and, when it is not the plan's first, which better layouts the framework cannot express.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from experiments.common.frameworks.deepspeed import emit_deepspeed
from experiments.common.frameworks.megatron import emit_megatron
from experiments.common.frameworks.torchtitan import emit_torchtitan
from simcore.planner.search import CountResult, PlanResult
from simcore.workload.loader import _preset_table

__all__ = ["EMITTERS", "emit_count", "emit_plan"]

EMITTERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]] = {
    "megatron": emit_megatron,
    "torchtitan": emit_torchtitan,
    "deepspeed": emit_deepspeed,
}


def _run(
    result: PlanResult, model: str, shape: Mapping[str, Any] | None, dtype: str, optimizer: str
) -> dict[str, Any]:
    config = result.prepared.job.config
    if shape is None:
        entry = _preset_table().get(model)
        shape = dict(entry["shape"]) if entry is not None and entry["family"] == "transformer" else {}
    return {"model": model, "shape": shape, "global_batch": config.global_batch, "seq_len": config.seq_len,
            "dtype": dtype, "optimizer": optimizer, "node_size": result.prepared.node_size}  # fmt: skip


def emit_count(framework: str, count: CountResult, run: Mapping[str, Any]) -> str:
    """The block of one GPU count: a ``#`` header, then the config (or why there is none)."""
    emit = EMITTERS[framework]
    skipped: list[str] = []
    for i, ranked in enumerate(count.ranked):
        layout = ranked.layout.to_record(count.gpus)
        replicas = max(1, layout["dp"] // run["node_size"]) if layout["strategy"] == "hsdp" else 1
        text = emit(layout, {**run, "hsdp_replicas": replicas})
        if text is None:
            skipped.append(str(layout["label"]))
            continue
        head = f"# {count.gpus} GPUs: {layout['label']} (rank {i + 1} of the plan"
        head += f"; not expressible in {framework}: {', '.join(skipped[:3])}" if skipped else ""
        return f"{head})\n{text.rstrip()}\n"
    return f"# {count.gpus} GPUs: no ranked layout is expressible in {framework}\n"


def emit_plan(framework: str, result: PlanResult, *, model: str, shape: Mapping[str, Any] | None,
              dtype: str, optimizer: str) -> str:  # fmt: skip
    """Every GPU count's block (see the module docstring)."""
    run = _run(result, model, shape, dtype, optimizer)
    return "\n".join(emit_count(framework, count, run) for count in result.counts)
