"""Small real documents for the page tests: each built the way its command builds it, in about a second."""

from __future__ import annotations

import json
from typing import Any

from experiments.nccl_sim.cli import _result_records, nccl_document, rows_for, size_ladder
from experiments.nccl_sim.outputs import alternatives, measured_rows
from experiments.report_html.whatif import whatif_document
from simcore.strategies.base import TrainingConfig
from simcore.whatif.sweep import run_what_if
from tests.paramserver_helpers import uniform_workload
from tests.paths import REPO
from topologies import load_cluster

NCCL_LOG = REPO / "tests" / "data" / "nccl" / "all_reduce_perf_8xa100.txt"
PUBLISHED = REPO / "experiments" / "results" / "published" / "comparison.json"
CONFIG = TrainingConfig(global_batch=8, micro_batch=2, dtype="bf16", optimizer="adamw")


def whatif_doc() -> dict[str, Any]:
    """ddp and fsdp of a four-layer model on one dgx-a100 node at 2 and 4 GPUs."""
    result = run_what_if(
        uniform_workload(layers=4, params=2_000_000), ["dgx-a100"], [2, 4], loader=load_cluster,
        strategies=["ddp", "fsdp"], config=CONFIG,
    )  # fmt: skip
    records = result.records()
    recommendations = [r.to_record() for r in result.recommendations]
    return whatif_document(result, records, recommendations, {}, "model uniform (test)")


def plan_doc(whatif: dict[str, Any]) -> dict[str, Any]:
    """A ``trainsim-plan`` document whose ranked layouts are the what-if's records (same fields)."""
    counts = []
    for gpus in sorted({r["gpus"] for r in whatif["records"]}):
        rows = sorted((r for r in whatif["records"] if r["gpus"] == gpus), key=lambda r: -r["samples_per_s"])
        ranked = [
            {"rank": i + 1, **r, "layout": {"label": f"{r['strategy']} mb=2", "strategy": r["strategy"]},
             "train_hours": 1.0 * i + 1, "train_cost": 2.0, "cost_per_million": 0.01 * gpus + 0.001 * i}
            for i, r in enumerate(rows)
        ]  # fmt: skip
        counts.append({"gpus": gpus, "nodes": 1, "device": rows[0]["device"], "considered": 4, "pruned": 0,
                       "evaluated": 2, "no_fit": 0, "skipped": None, "why": f"{ranked[0]['layout']['label']} wins",
                       "ranked": ranked})  # fmt: skip
    best = [c["ranked"][0] for c in counts]
    return {
        "schema": "trainsim-plan", "version": 1, "model": "uniform", "params": 2_000_000, "cluster": "dgx-a100",
        "global_batch": 8, "seq_len": None, "tokens_per_step": None, "search": {"strategies": ["ddp", "fsdp"]},
        "configs_considered": 8, "configs_pruned": 0, "configs_evaluated": 4, "interrupted": False,
        "gpu_counts": counts, "pareto_gpus": best, "pareto_cost": best[:1],
    }  # fmt: skip


def nccl_doc() -> dict[str, Any]:
    """all_reduce on 8 A100s from 8 B to 64 MiB, NCCL's choice, pinned pairs and a measured log."""
    topology = load_cluster("dgx-a100")
    sizes = size_ladder(8, 64 * 2**20, 4, 2**20)
    doc = nccl_document(topology, "all_reduce", "float", "aggregate", rows_for(topology, "all_reduce", sizes))

    def simulate(algorithm: str, protocol: str) -> list[dict[str, Any]]:
        return _result_records(
            rows_for(topology, "all_reduce", sizes, algorithm=algorithm, protocol=protocol)
        )

    doc["alternatives"], doc["notes"] = alternatives(["ring", "tree", "nvls"], ["LL", "Simple"], simulate, 80)
    doc["measured"] = measured_rows(str(NCCL_LOG), "all_reduce")
    return doc


def published_doc() -> dict[str, Any]:
    """The committed full comparison (``python -m experiments.validate_published --out ...``)."""
    return json.loads(PUBLISHED.read_text(encoding="utf-8"))
