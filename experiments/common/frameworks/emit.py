"""``plan --emit megatron|torchtitan|deepspeed``: each GPU count's best layout in the framework's terms.

Per GPU count, the best-ranked layout the framework can run is printed (a Megatron argument
line, a torchtitan TOML fragment or a DeepSpeed JSON), after a ``#`` line naming the count, the
layout and, when it is not the plan's first, which better layouts the framework cannot express,
then a ``# cannot express --LEVER: ...`` line for each lever the plan priced that the framework
runs otherwise (:mod:`.levers`: every other lever reads back with ``--from`` as the plan had it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from experiments.common.frameworks.deepspeed import emit_deepspeed
from experiments.common.frameworks.levers import Emitted
from experiments.common.frameworks.megatron_emit import emit_megatron
from experiments.common.frameworks.torchtitan_emit import emit_torchtitan
from simcore.planner.search import CountResult, PlanResult
from simcore.workload.loader import _preset_table

__all__ = ["EMITTERS", "EXTENSIONS", "emit_count", "emit_plan", "emit_text", "run_levers", "write_emitted"]

EMITTERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Emitted | None]] = {
    "megatron": emit_megatron,
    "torchtitan": emit_torchtitan,
    "deepspeed": emit_deepspeed,
}


def run_levers(args: argparse.Namespace) -> dict[str, Any]:
    """The plan's run-wide levers, as the emitters take them (a plan's parsed arguments)."""
    return {"dtype": args.dtype, "fp8": args.fp8, "optimizer": args.optimizer, "compile": bool(args.compile),
            "master_weights": not args.no_master_weights, "saved_tensors": args.saved_tensors,
            "cross_entropy": args.cross_entropy, "ring_kv": getattr(args, "ring_kv", "grouped"),
            "ring_merge": getattr(args, "ring_merge", "fused"),
            "zero_bucket_size": args.zero_bucket_size,
            "zero_allgather_bucket_size": args.zero_allgather_bucket_size,
            "zero_overlap_comm": args.zero_overlap_comm, "zero3_prefetch_bucket_size": args.zero3_prefetch_bucket_size,
            "zero3_max_live_parameters": args.zero3_max_live_parameters,
            "zero3_max_reuse_distance": args.zero3_max_reuse_distance}  # fmt: skip


def _run(
    result: PlanResult, model: str, shape: Mapping[str, Any] | None, levers: Mapping[str, Any]
) -> dict[str, Any]:
    config = result.prepared.job.config
    if shape is None:
        entry = _preset_table().get(model)
        shape = dict(entry["shape"]) if entry is not None and entry["family"] == "transformer" else {}
    return {**levers, "model": model, "shape": shape, "global_batch": config.global_batch,
            "seq_len": config.seq_len, "node_size": result.prepared.node_size}  # fmt: skip


EXTENSIONS = {"megatron": "args", "torchtitan": "toml", "deepspeed": "json"}
# Whose config files hold ``#`` comment lines (a DeepSpeed JSON cannot: its notes are printed only)
COMMENTED = ("megatron", "torchtitan")


def emit_count(framework: str, count: CountResult, run: Mapping[str, Any]) -> tuple[str, str | None]:
    """(a ``#`` header naming the count and the layout, the config) of one GPU count; the config is
    None when no ranked layout is expressible in the framework."""
    emit = EMITTERS[framework]
    skipped: list[str] = []
    for i, ranked in enumerate(count.ranked):
        layout = ranked.layout.to_record(count.gpus)
        replicas = max(1, layout["dp"] // run["node_size"]) if layout["strategy"] == "hsdp" else 1
        emitted = emit(layout, {**run, "hsdp_replicas": replicas})
        if emitted is None:
            skipped.append(str(layout["label"]))
            continue
        head = f"# {count.gpus} GPUs: {layout['label']} (rank {i + 1} of the plan"
        if skipped:
            more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
            head += f"; not expressible in {framework}: {', '.join(skipped[:3])}{more}"
        notes = emitted.notes()
        body = "\n".join([*notes, emitted.text.rstrip()]) if framework in COMMENTED else emitted.text.rstrip()
        return "\n".join([f"{head})", *([] if framework in COMMENTED else notes)]), body + "\n"
    return f"# {count.gpus} GPUs: no ranked layout is expressible in {framework}", None


def emit_plan(
    framework: str,
    result: PlanResult,
    *,
    model: str,
    shape: Mapping[str, Any] | None,
    levers: Mapping[str, Any],
) -> list[tuple[int, str, str | None]]:
    """(GPU count, header, config or None) per GPU count (see the module docstring); ``levers`` the
    run-wide ones (:func:`run_levers`)."""
    run = _run(result, model, shape, levers)
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
