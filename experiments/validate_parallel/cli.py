"""Predicted vs published throughput of Megatron-LM's tensor/pipeline/3-D parallel runs.

    python -m experiments.validate_parallel                 # every row, a table and the MAPE
    python -m experiments.validate_parallel --only table1   # rows whose config starts with table1
    python -m experiments.validate_parallel --format json

Rows (``published_megatron.csv`` beside this module, each with its source): Narayanan et al. 2021
(arXiv 2104.04473) Table 1, the weak-scaling GPT runs from 1.7 B to 1 T parameters on DGX A100
servers, configurations from Megatron-LM's ``examples/sc21/run_table_1.sh`` (achieved TFLOP/s
per GPU, counted with the paper's eq. 3, which includes the recomputed forward); and Korthikanti
et al. 2022 (arXiv 2205.05198) Table 5, the 22 B to 1 T runs with and without sequence
parallelism and selective recompute (model FLOPs utilisation, the paper's eq. 7).

Each row is predicted with :func:`simcore.parallel.simulate_parallel_step` on ``dgx-a100``
servers (A100 80 GB SXM, NVSwitch, HDR InfiniBand): a GPT-3-style transformer of the row's shape
(learned positions, LayerNorm, biases, GeLU feed-forward of 4 x hidden, tied embeddings, dropout,
attention without FlashAttention, as in 2021-22; the 2021 Table 1 rows with Megatron-LM v2's
blocking pipeline sends, :func:`blocking_p2p`), bf16 with fp32 master weights and Adam, the DDP
data-parallel axis. The predicted metric uses the paper's own FLOP count over the predicted step
time, so the comparison is of step times. :func:`predict_row` is the interface for other harnesses.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.validate_parallel.args import build_parser
from simcore.errors import TrainsimError, cli_entry
from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.report_checks import check_records
from simcore.strategies.base import TrainingConfig
from simcore.topology import ClusterLoader
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import Workload
from topologies import load_cluster

__all__ = ["DATA", "PredictedRow", "blocking_p2p", "load_rows", "main", "mape", "paper_flops", "predict_row"]

DATA = Path(__file__).parent / "published_megatron.csv"
CLUSTER = "dgx-a100"
PEAK_FLOPS = 312e12  # A100 bf16/fp16 dense tensor-core peak, as both papers use


@dataclass(frozen=True, slots=True)
class PredictedRow:
    """One published row with its prediction."""

    config: str
    metric: str
    published: float
    predicted: float
    step_time_s: float
    bubble: float
    error: float  # (predicted - published) / published


def load_rows(path: Path = DATA) -> list[dict[str, str]]:
    """The published rows as plain string mappings."""
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def paper_flops(row: Mapping[str, str]) -> float:
    """FLOPs of one iteration as the row's paper counts them.

    Narayanan et al. 2021, eq. 3 (with recompute): ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``;
    Korthikanti et al. 2022, eq. 7 (model FLOPs): ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``.
    """
    b, s, n, h, v = (float(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    if row["metric"] == "tflops_per_gpu":
        return 96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    return 72 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))


def _workload(row: Mapping[str, str]) -> Workload:
    h = int(row["hidden"])
    shape = TransformerShape(
        layers=int(row["layers"]),
        hidden=h,
        heads=int(row["heads"]),
        ffn=4 * h,
        vocab=int(row["vocab"]),
        seq_len=int(row["seq_len"]),
        flash_attention=False,
        fused_softmax=True,  # Megatron-LM's FusedScaleMaskSoftmax (masked_softmax_fusion, on by default)
    )
    return build_workload(row["model"], shape, seq_len=None, dtype="bf16", source=row["source"])


def blocking_p2p(row: Mapping[str, str]) -> bool:
    """Whether the row's Megatron-LM sent its pipeline activations blocking: the 2021 code of
    Narayanan et al.'s Table 1 (v2.x, ``megatron/p2p_communication.py``: ``batch_isend_irecv``, a
    wait on every request, then ``torch.cuda.synchronize()``), see :mod:`simcore.parallel.pp`."""
    return row["config"].startswith("table1-")


def predict_row(row: Mapping[str, str], loader: ClusterLoader = load_cluster) -> PredictedRow:
    """Predict one published row (keys as in ``published_megatron.csv``)."""
    gpus = int(row["gpus"])
    layout = ParallelLayout(tp=int(row["tp"]), pp=int(row["pp"]), vpp=int(row["vpp"]))
    options = ParallelOptions(
        recompute=row["recompute"],
        sequence_parallel=row["sequence_parallel"] == "true",
        p2p_blocking=blocking_p2p(row),
    )
    config = TrainingConfig(
        global_batch=int(row["global_batch"]),
        micro_batch=int(row["micro_batch"]),
        seq_len=int(row["seq_len"]),
        dtype="bf16",
        optimizer="adam",
    )
    topology = loader(CLUSTER, gpus=gpus)
    result = simulate_parallel_step(_workload(row), config, topology, "ddp", layout, options, cluster=CLUSTER)
    check_records([result.report], f"validate_parallel's {row['config']}")
    step = result.report.step_time_s
    achieved = paper_flops(row) / (step * gpus)
    predicted = achieved / 1e12 if row["metric"] == "tflops_per_gpu" else achieved / PEAK_FLOPS
    published = float(row["value"])
    return PredictedRow(
        row["config"],
        row["metric"],
        published,
        predicted,
        step,
        result.report.pipeline_bubble_fraction,
        predicted / published - 1,
    )


def mape(rows: Sequence[PredictedRow]) -> float:
    """Mean absolute percentage error of the predictions, in percent."""
    return 100.0 * math.fsum(abs(r.error) for r in rows) / len(rows) if rows else float("nan")


def format_table(rows: Sequence[PredictedRow]) -> str:
    lines = [
        f"{'config':32} {'metric':15} {'published':>9} {'predicted':>9} {'error':>7} {'step s':>8} {'bubble':>6}"
    ]
    for r in rows:
        lines.append(
            f"{r.config:32} {r.metric:15} {r.published:>9.3f} {r.predicted:>9.3f} {r.error * 100:>6.1f}% "
            f"{r.step_time_s:>8.2f} {r.bubble:>6.2f}"
        )
    for metric in sorted({r.metric for r in rows}):
        group = [r for r in rows if r.metric == metric]
        lines.append(f"MAPE {metric}: {mape(group):.1f}% over {len(group)} rows")
    lines.append(f"MAPE all: {mape(rows):.1f}% over {len(rows)} rows")
    return "\n".join(lines) + "\n"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = [r for r in load_rows() if r["config"].startswith(args.only)]
    if not rows:
        raise TrainsimError(f"--only {args.only!r} matches no published row")
    predicted = [predict_row(row) for row in rows]
    if args.format == "json":
        print(json.dumps({"rows": [asdict(r) for r in predicted], "mape_percent": mape(predicted)}, indent=1))
    else:
        print(format_table(predicted), end="")
    return 0
