"""StepReport: what one simulated (cluster, strategy, GPU count) point predicts, as plain records.

JSON schema (``StepReport.to_record()``; ``python -m experiments.what_if --format json`` prints
``{"schema": "trainsim-what-if", "version": 1, "records": [...], "recommendations": [...]}``).
Version 1 fields, all SI (seconds, bytes); new fields may be added, none renamed or removed:

=====================  ============================================================================
cluster                cluster preset name or YAML path as given
strategy               ddp | fsdp | zero1 | zero2 | zero3 | hsdp | ps-sync | ps-async | ps-ssp | ps-mitigated
gpus                   data-parallel ranks
model                  workload name
device                 GPU spec that gates the step: every rank's on a homogeneous cluster, the
                       slowest on a mixed one (e.g. ``a100-sxm-80gb``)
global_batch           samples per optimizer step over all GPUs
micro_batch            samples per GPU per forward/backward
accumulation_steps     micro-batches per GPU per step = global_batch / (gpus * micro_batch)
step_time_s            median (p50) step time over the simulated steps
step_time_p99_s        99th percentile step time (equal to p50 without jitter or stragglers)
samples_per_s          global_batch / step_time_s
tokens_per_s           samples_per_s * sequence length (language models; null otherwise)
scaling_efficiency     samples_per_s / (gpus * samples_per_s of the same strategy on one GPU of the
                       same cluster with the same global batch, by gradient accumulation); null
                       when not computed. If one GPU cannot hold the model the baseline is a
                       hypothetical GPU with unlimited memory (``baseline_fits`` false). Under
                       weak scaling (a fixed batch per GPU) the baseline runs that per-GPU batch,
                       so a sharded optimizer's update can put the efficiency above 1.
baseline_fits          whether that one-GPU baseline fits in memory (null when not computed)
mfu                    model FLOPs per step / (gpus * peak dense FLOP/s * step_time_s); model FLOPs
                       = 6 * params * tokens for language models, forward + backward FLOPs
                       otherwise, recomputation excluded
compute_s              compute-only time of the step (no communication, no slowdown)
exposed_comm_s         step_time - compute_s: communication (and its slowdown of compute) not hidden
comm_s                 time the rank's communication stream was busy
comm_bytes             sum of the collective buffer sizes the rank took part in (nccl-tests sizes)
peak_memory_bytes      per-rank peak over the step's memory timeline
peak_phase             the operation running at the peak ("backward of block3", "optimizer step")
memory_breakdown       bytes at the peak: params, grads, optimizer, activations, buffers, overhead
memory_capacity_bytes  the device's memory
fits                   peak_memory_bytes <= memory_capacity_bytes
oom_verdict            one line: fits with the peak, or OOM by how much and where
link_utilisation       {link kind: fraction of the step a collective limited by that kind of link
                       was running}
bottleneck_link        the link limiting the collectives that took the most time
memory_status          ``fits``, ``fits with < 10% headroom`` or ``OOM`` (peak as the caching allocator
                       sees it: tensors, fragmentation, CUDA context, NCCL buffers)
precision              the precision mode the strategy ran and its dtypes, e.g. ``amp (fp32 params,
                       fp32 grads, fp32 reduce, bf16 matmuls)`` (:mod:`simcore.compute.precision`)
optimizer_impl         the optimizer implementation it assumed: ``foreach``, ``fused`` or ``single``
note                   a remark on the point (e.g. when zero1 and zero2 run the same step); "" if none
=====================  ============================================================================

No record may be physically impossible (MFU above 1, compute faster than its FLOPs at peak,
scaling efficiency above 1, a negative or non-finite number): the commands pass what they print
through :func:`simcore.report_checks.check_records` once, which makes such a record an internal
error (exit status 70) instead of an answer.

Parameter-server records (``ps-*``) carry these fields first, then ``staleness`` {mean, p50, p99,
max}, ``staleness_histogram`` and the other fields documented in :mod:`simcore.paramserver.report`.

CSV (``--format csv``, :data:`CSV_COLUMNS`): one row per record with the same columns in every run,
whatever the strategies, clusters or links: the scalar fields above in that order, then
``memory_breakdown.<category>`` for each memory category (params, grads, optimizer, activations,
buffers, temp, overhead), then the parameter server's scalars (``mode``, ``ps_shards``,
``ps_placement``, ``staleness_bound``, ``staleness.mean``/``.p50``/``.p99``/``.max``,
``recomputes``, ``clock_lag_max``, ``shard_imbalance``, ``server_busy``,
``throughput_samples_per_s``, ``bottleneck_utilisation``, ``gradients_applied``), empty for the
synchronous strategies. Variable-length data (``link_utilisation``, ``staleness_histogram``,
``busiest_links``, per-worker lists) is in the JSON only.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from simcore.compute.memory import CATEGORIES

__all__ = [
    "CSV_COLUMNS",
    "RECORD_FIELDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "LinkBusy",
    "StepReport",
    "records_to_csv",
    "records_to_json",
]

SCHEMA = "trainsim-what-if"
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class StepReport:
    """The prediction for one (cluster, strategy, gpus) point; see the module docstring."""

    cluster: str
    strategy: str
    gpus: int
    model: str
    device: str
    global_batch: int
    micro_batch: int
    accumulation_steps: int
    step_time_s: float
    step_time_p99_s: float
    samples_per_s: float
    tokens_per_s: float | None
    scaling_efficiency: float | None
    baseline_fits: bool | None
    mfu: float
    compute_s: float
    exposed_comm_s: float
    comm_s: float
    comm_bytes: float
    peak_memory_bytes: float
    peak_phase: str
    memory_breakdown: Mapping[str, float]
    memory_capacity_bytes: float
    fits: bool
    oom_verdict: str
    link_utilisation: Mapping[str, float] = field(default_factory=dict)
    bottleneck_link: str = ""
    memory_status: str = ""
    precision: str = ""
    optimizer_impl: str = ""
    note: str = ""

    def to_record(self) -> dict[str, Any]:
        """A plain JSON-ready dict with the documented, stable field names."""
        record = asdict(self)
        record["memory_breakdown"] = dict(self.memory_breakdown)
        record["link_utilisation"] = dict(self.link_utilisation)
        return record


RECORD_FIELDS = tuple(StepReport.__dataclass_fields__)


@dataclass(slots=True)
class LinkBusy:
    """Seconds each link kind and each link carried a collective: the one tally behind a report's
    ``link_utilisation`` and ``bottleneck_link``, whether the step was simulated, evaluated without
    events, extrapolated from a probe's period or folded from shallower copies.

    ``by_kind`` names a collective's limiting link kind (``"unknown"`` when it names none);
    ``by_link``: the link itself (``""`` when unknown)."""

    by_kind: dict[str, float] = field(default_factory=dict)
    by_link: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str | None, link: str, start_s: float, end_s: float) -> None:
        """One collective's busy span (nothing when it took no time)."""
        if end_s <= start_s:
            return
        kind = kind or "unknown"
        # (added as total + end - start, in that order, wherever a span is counted: bit-identical tallies)
        self.by_kind[kind] = self.by_kind.get(kind, 0.0) + end_s - start_s
        self.by_link[link] = self.by_link.get(link, 0.0) + end_s - start_s

    def add_times(self, other: LinkBusy, times: float) -> None:
        """``times`` more of ``other`` (a repeated period: one middle micro-batch's busy time)."""
        for kind, seconds in other.by_kind.items():
            self.by_kind[kind] = self.by_kind.get(kind, 0.0) + times * seconds
        for link, seconds in other.by_link.items():
            self.by_link[link] = self.by_link.get(link, 0.0) + times * seconds

    def utilisation(self, step_s: float) -> dict[str, float]:
        """Each link kind's busy fraction of a ``step_s`` step, by kind name."""
        return {kind: self.by_kind[kind] / step_s for kind in sorted(self.by_kind)}

    def bottleneck(self) -> str:
        """The busiest link (ties: the first by name); ``""`` when no collective ran."""
        links = self.by_link
        return max(sorted(links), key=lambda name: links[name]) if links else ""


def records_to_json(records: Sequence[Mapping[str, Any]], **extra: Any) -> str:
    """The versioned JSON document of the what-if: schema, version, records and extras."""
    document = {"schema": SCHEMA, "version": SCHEMA_VERSION, "records": list(records), **extra}
    return json.dumps(document, indent=2, sort_keys=False)


_NESTED = ("memory_breakdown", "link_utilisation")
_PS_COLUMNS = (
    "mode", "ps_shards", "ps_placement", "staleness_bound", "staleness.mean", "staleness.p50",
    "staleness.p99", "staleness.max", "recomputes", "clock_lag_max", "shard_imbalance", "server_busy",
    "throughput_samples_per_s", "bottleneck_utilisation", "gradients_applied",
)  # fmt: skip
CSV_COLUMNS = (
    *(name for name in RECORD_FIELDS if name not in _NESTED),
    *(f"memory_breakdown.{category}" for category in CATEGORIES),
    *_PS_COLUMNS,
)


def _cell(record: Mapping[str, Any], column: str) -> Any:
    head, _, sub = column.partition(".")
    value = record.get(column, record.get(head) if sub else None)
    if sub and isinstance(value, Mapping):
        value = value.get(sub)
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else value


def records_to_csv(records: Sequence[Mapping[str, Any]]) -> str:
    """One CSV row per record with the fixed :data:`CSV_COLUMNS` (see the module docstring)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in records:
        writer.writerow([_cell(record, column) for column in CSV_COLUMNS])
    return out.getvalue()
