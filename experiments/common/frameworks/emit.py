"""``plan --emit megatron|torchtitan|deepspeed``: each GPU count's best layout in the framework's terms.

Per GPU count, the best-ranked layout the framework can run is printed (a Megatron argument
line, a torchtitan TOML fragment or a DeepSpeed JSON), after a ``#`` line naming the count, the
layout and, when it is not the plan's first, which better layouts the framework cannot express.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from experiments.common.frameworks.deepspeed import emit_deepspeed
from experiments.common.frameworks.megatron import emit_megatron
from experiments.common.frameworks.torchtitan import emit_torchtitan
from simcore.planner.search import CountResult, PlanResult
from simcore.workload.loader import _preset_table

__all__ = ["EMITTERS", "EXTENSIONS", "emit_count", "emit_plan", "emit_text", "write_emitted"]

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


EXTENSIONS = {"megatron": "args", "torchtitan": "toml", "deepspeed": "json"}


def emit_count(framework: str, count: CountResult, run: Mapping[str, Any]) -> tuple[str, str | None]:
    """(a ``#`` header naming the count and the layout, the config) of one GPU count; the config is
    None when no ranked layout is expressible in the framework."""
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
        if skipped:
            more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
            head += f"; not expressible in {framework}: {', '.join(skipped[:3])}{more}"
        return f"{head})", text.rstrip() + "\n"
    return f"# {count.gpus} GPUs: no ranked layout is expressible in {framework}", None


def emit_plan(
    framework: str,
    result: PlanResult,
    *,
    model: str,
    shape: Mapping[str, Any] | None,
    dtype: str,
    optimizer: str,
) -> list[tuple[int, str, str | None]]:
    """(GPU count, header, config or None) per GPU count (see the module docstring)."""
    run = _run(result, model, shape, dtype, optimizer)
    return [(count.gpus, *emit_count(framework, count, run)) for count in result.counts]


def emit_text(blocks: list[tuple[int, str, str | None]]) -> str:
    """The blocks as printed: each header, then its config."""
    return "\n".join(head + "\n" + (body or "") for _, head, body in blocks)


def write_emitted(framework: str, blocks: list[tuple[int, str, str | None]], out: Path) -> list[Path]:
    """One file per GPU count with a config (``megatron_64gpus.args``, ``torchtitan_64gpus.toml`` ...),
    each readable back with ``--from``."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for gpus, _, body in blocks:
        if body is not None:
            path = out / f"{framework}_{gpus}gpus.{EXTENSIONS[framework]}"
            path.write_text(body, encoding="utf-8")
            written.append(path)
    return written
