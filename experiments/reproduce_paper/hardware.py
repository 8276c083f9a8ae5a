"""The hardware comparisons of the article "Understanding Distributed Training Strategies and
Hardware Effects", simulated: NVLink vs forced PCIe, fabric scaling, ZeRO stages.

- :func:`forced_pcie` is a preset with its NVLink and NVSwitch links removed, so peer traffic takes
  the PCIe switches and host bridges, as when NCCL is kept off NVLink;
- :func:`allreduce_busbw_Bps` is nccl-tests' bus bandwidth of one all-reduce from
  :func:`simcore.collectives.collective_time`;
- :func:`simulate_point` runs one strategy's step on any topology (also a modified one) with
  :mod:`simcore.strategies.runner`;
- ``evaluate_*`` turn those numbers into :class:`~experiments.reproduce_paper.claims.ClaimResult` rows.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from experiments.reproduce_paper.claims import ClaimResult, PaperSetting
from simcore.collectives import busbw_factor, collective_time
from simcore.compute.memory import model_state_bytes
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import gating_device, make_context, report_step, simulate_step
from simcore.topology import Topology
from simcore.workload.loader import load_workload
from topologies import load_cluster

if TYPE_CHECKING:
    from simcore.report import StepReport
    from simcore.workload.types import Workload

__all__ = [
    "HARDWARE_EVALUATORS",
    "NVLINK_KINDS",
    "allreduce_busbw_Bps",
    "article_config",
    "cached_cluster",
    "cached_workload",
    "evaluate_fabric_scaling",
    "evaluate_fsdp_by_fabric",
    "evaluate_mistral_memory",
    "evaluate_nvlink_vs_pcie",
    "evaluate_zero_stages",
    "forced_pcie",
    "hardware_claims",
    "nvl_group_size",
    "simulate_point",
]

NVLINK_KINDS = ("nvlink", "nvswitch")
CLOSE = 1.10  # FSDP within 10% of DDP's step time counts as "closely matches"
GB = 1e9


def forced_pcie(topology: Topology) -> Topology:
    """A copy of ``topology`` without NVLink/NVSwitch links (and switches left with no link)."""
    graph = topology.graph.copy()
    graph.remove_edges_from(
        [(u, v) for u, v, a in topology.graph.edges(data=True) if a["kind"] in NVLINK_KINDS]
    )
    graph.remove_nodes_from([n for n in topology.graph.nodes if graph.degree(n) == 0])
    metadata = {**topology.metadata, "forced_pcie": True}
    return Topology(f"{topology.name} (forced PCIe)", graph, list(topology.ranks), metadata)


def allreduce_busbw_Bps(topology: Topology, size_bytes: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of ``size_bytes`` over all ranks of ``topology``."""
    result = collective_time(topology, "all_reduce", size_bytes)
    return size_bytes / result.time_s * busbw_factor("all_reduce", topology.world_size)


@cache
def cached_cluster(preset: str, gpus: int) -> Topology:
    """``topologies.load_cluster(preset, gpus=gpus)``, loaded once per process (never modified)."""
    return load_cluster(preset, gpus=gpus)


@cache
def cached_workload(name: str, seq_len: int | None = None) -> Workload:
    """``simcore.workload.loader.load_workload(name, seq_len=seq_len)``, loaded once per process."""
    return load_workload(name, seq_len=seq_len)


def nvl_group_size(topology: Topology) -> int:
    """GPUs joined to rank 0 by direct NVLink (rank 0 included): the NVL group of the article."""
    first = topology.ranks[0]
    peers = {v for _, v, a in topology.graph.out_edges(first, data=True) if a["kind"] == "nvlink"}
    return 1 + len(peers & set(topology.ranks))


def article_config(setting: PaperSetting, *, master_weights: bool = True) -> TrainingConfig:
    """The training configuration of the article's comparisons (tensor-only peak memory)."""
    return TrainingConfig(
        global_batch=setting.article_global_batch,
        micro_batch=setting.article_micro_batch,
        seq_len=setting.article_seq_len,
        dtype="bf16",
        optimizer="adamw",
        master_weights=master_weights,
        allocator_overhead_bytes=0,
    )


def simulate_point(
    workload: Workload,
    config: TrainingConfig,
    topology: Topology,
    strategy: str,
    label: str,
    *,
    seed: int = 0,
) -> StepReport:
    """One step of ``strategy`` on ``topology`` (any graph, including :func:`forced_pcie` copies)."""
    ctx = make_context(workload, config, topology)
    step = simulate_step(get_strategy(strategy), ctx, seed=seed, slowdown=config.slowdown(None))
    device = gating_device(topology, config.dtype)
    return report_step(step, ctx, cluster=label, device=device.name, peak_flops=device.flops(config.dtype))


def _checks(
    claim_id: str, checks: Sequence[tuple[str, bool]], details: Sequence[str], assumptions: Sequence[str] = ()
) -> ClaimResult:
    held = sum(ok for _, ok in checks)
    predicted = f"{held} of {len(checks)} checks hold: " + "; ".join(
        f"{name} {'yes' if ok else 'NO'}" for name, ok in checks
    )
    return ClaimResult.judged(
        claim_id,
        predicted,
        [1.0 if ok else 0.0 for _, ok in checks],
        [n for n, _ in checks],
        details,
        assumptions,
    )


def evaluate_nvlink_vs_pcie(setting: PaperSetting) -> ClaimResult:
    """All-reduce bus bandwidth with NVLink / with the same GPUs forced onto PCIe."""
    ratios, labels, details = [], [], []
    for preset in setting.nvlink_presets:
        for gpus in setting.nvlink_gpus:
            native = cached_cluster(preset, gpus)
            fast = allreduce_busbw_Bps(native, setting.message_bytes)
            slow = allreduce_busbw_Bps(forced_pcie(native), setting.message_bytes)
            ratios.append(fast / slow)
            labels.append(f"{preset} {gpus} GPUs")
            details.append(
                f"{preset} {gpus} GPUs: {fast / GB:.1f} GB/s NVLink vs {slow / GB:.1f} GB/s PCIe "
                f"= {fast / slow:.1f}x"
            )
    best = max(range(len(ratios)), key=lambda i: ratios[i])
    predicted = f"up to {ratios[best]:.1f}x ({labels[best]}); smallest {min(ratios):.1f}x"
    return ClaimResult.judged("nvlink-10x", predicted, ratios, labels, details)


def _busbw_curve(preset: str, counts: Sequence[int], size_bytes: float) -> dict[int, float]:
    return {n: allreduce_busbw_Bps(cached_cluster(preset, n), size_bytes) for n in counts}


def evaluate_fabric_scaling(setting: PaperSetting) -> ClaimResult:
    """NVSwitch vs NVL groups vs PCIe: how all-reduce bus bandwidth holds up as GPUs are added."""
    counts = sorted(setting.fabric_gpus)
    curves = {
        (fabric, p): _busbw_curve(p, counts, setting.message_bytes)
        for fabric, presets in setting.fabric_presets
        for p in presets
    }
    details = [
        f"{fabric:10s} {p:15s} " + "  ".join(f"{n}: {bw / GB:6.1f}" for n, bw in c.items()) + " GB/s"
        for (fabric, p), c in curves.items()
    ]
    kept = {key: c[counts[-1]] / c[counts[0]] for key, c in curves.items()}
    nvswitch = [key for key in curves if key[0] == "NVSwitch"]
    nvl = [key for key in curves if key[0] == "NVL groups"]
    pcie = [key for key in curves if key[0] == "PCIe"]
    steady = all(min(curves[k].values()) >= 0.8 * curves[k][counts[0]] for k in nvswitch)
    checks = [("NVSwitch keeps >= 80%", steady)]
    for key in nvl:
        group = nvl_group_size(cached_cluster(key[1], counts[-1]))
        inside = max((n for n in counts if n <= group), default=counts[0])
        across = min((n for n in counts if n > group), default=counts[-1])
        reference = statistics.median(curves[k][inside] for k in nvswitch) if nvswitch else 0.0
        details.append(f"{key[1]}: NVL group of {group}; {inside} GPUs inside, {across} crossing groups")
        checks.append(("NVL good inside a group", curves[key][inside] >= 0.8 * reference))
        checks.append(("NVL degrades across groups", curves[key][across] <= 0.5 * curves[key][inside]))
    others = [kept[k] for k in kept if k[0] != "PCIe"]
    steepest = all(kept[k] < min(others) for k in pcie) if others else False
    details.append(
        "share of the 2-GPU bandwidth kept at the largest count: "
        + ", ".join(f"{k[1]} {v:.2f}" for k, v in kept.items())
    )
    checks.append(("PCIe declines steepest", bool(pcie) and steepest))
    return _checks("fabric-scaling", checks, details)


def _fabrics(setting: PaperSetting) -> dict[str, Topology]:
    """NVSwitch, the same servers forced onto PCIe, and a cross-group NVL server (the article's fabrics)."""
    nvswitch = cached_cluster(setting.a100_cluster, setting.gpus)
    return {
        "NVSwitch": nvswitch,
        "forced PCIe": forced_pcie(nvswitch),
        "cross-group NVL": cached_cluster("pcie-nvl-pairs", 4),
    }


def _strategy_reports(setting: PaperSetting, strategies: Sequence[str]) -> dict[tuple[str, str], StepReport]:
    workload = cached_workload(setting.article_model, setting.article_seq_len)
    config = article_config(setting)
    return {
        (label, s): simulate_point(workload, config, topo, s, label, seed=setting.seed)
        for label, topo in _fabrics(setting).items()
        for s in strategies
    }


def evaluate_fsdp_by_fabric(setting: PaperSetting) -> ClaimResult:
    """FSDP step time / DDP step time on NVSwitch, forced PCIe and cross-group NVL."""
    reports = _strategy_reports(setting, ("ddp", "fsdp"))
    ratio = {
        fabric: reports[(fabric, "fsdp")].step_time_s / reports[(fabric, "ddp")].step_time_s
        for fabric in ("NVSwitch", "forced PCIe", "cross-group NVL")
    }
    details = [
        f"{fabric}: DDP {reports[(fabric, 'ddp')].step_time_s * 1e3:.1f} ms, FSDP "
        f"{reports[(fabric, 'fsdp')].step_time_s * 1e3:.1f} ms (x{r:.2f}); exposed comm DDP "
        f"{reports[(fabric, 'ddp')].exposed_comm_s * 1e3:.1f} ms, FSDP "
        f"{reports[(fabric, 'fsdp')].exposed_comm_s * 1e3:.1f} ms"
        for fabric, r in ratio.items()
    ]
    checks = [
        (f"close on NVSwitch (x{ratio['NVSwitch']:.2f})", ratio["NVSwitch"] <= CLOSE),
        (f"losing on forced PCIe (x{ratio['forced PCIe']:.2f})", ratio["forced PCIe"] > CLOSE),
        (f"losing on cross-group NVL (x{ratio['cross-group NVL']:.2f})", ratio["cross-group NVL"] > CLOSE),
        ("worse on PCIe than NVSwitch", ratio["forced PCIe"] > ratio["NVSwitch"]),
    ]
    return _checks("fsdp-close-on-nvswitch", checks, details, (_fabric_note(setting),))


def _fabric_note(setting: PaperSetting) -> str:
    return (
        f"NVSwitch = {setting.a100_cluster} {setting.gpus} GPUs; forced PCIe = the same without NVLink; "
        "cross-group NVL = pcie-nvl-pairs 4 GPUs (2 NVLink pairs joined by PCIe)"
    )


def evaluate_zero_stages(setting: PaperSetting) -> ClaimResult:
    """Peak memory and step time of DDP and ZeRO-1/2/3 on NVSwitch and forced PCIe."""
    stages = ("ddp", "zero1", "zero2", "zero3")
    reports = _strategy_reports(setting, stages)
    details = []
    for fabric in ("NVSwitch", "forced PCIe"):
        details.append(
            f"{fabric}: "
            + ", ".join(
                f"{s} {reports[(fabric, s)].peak_memory_bytes / GB:.1f} GB {reports[(fabric, s)].step_time_s * 1e3:.0f} ms"
                for s in stages
            )
        )
    peaks = [reports[("NVSwitch", s)].peak_memory_bytes for s in stages]
    falling = all(later < earlier for earlier, later in itertools.pairwise(peaks))

    def penalty(fabric: str) -> float:
        return reports[(fabric, "zero3")].step_time_s / reports[(fabric, "ddp")].step_time_s

    checks = [
        ("peak falls stage by stage", falling),
        (
            f"ZeRO-3 slowdown larger on PCIe (x{penalty('forced PCIe'):.2f} vs x{penalty('NVSwitch'):.2f})",
            penalty("forced PCIe") > penalty("NVSwitch"),
        ),
        (
            "ZeRO-1 no slower than ZeRO-3 on PCIe",
            reports[("forced PCIe", "zero1")].step_time_s <= reports[("forced PCIe", "zero3")].step_time_s,
        ),
    ]
    return _checks("zero-stages", checks, details, (_fabric_note(setting),))


def evaluate_mistral_memory(setting: PaperSetting) -> ClaimResult:
    """The article's Mistral-7B example: model state per GPU and whether a DDP replica fits an A100."""
    workload = cached_workload(setting.article_example, setting.article_seq_len)
    config = article_config(setting, master_weights=False)
    state = model_state_bytes(
        0, workload.params, 1, config.param_bytes, config.grad_bytes, config.optimizer_bytes
    )
    total = sum(state.values())
    topo = cached_cluster(setting.a100_cluster, setting.gpus)
    ddp = simulate_point(workload, config, topo, "ddp", setting.a100_cluster, seed=setting.seed)
    details = [
        f"{workload.params / 1e9:.2f} B parameters: "
        + ", ".join(f"{k} {v / GB:.1f} GB" for k, v in state.items()),
        f"DDP per GPU: {ddp.oom_verdict}",
    ]
    checks = [
        (f"state {total / GB:.1f} GB within 10% of 87 GB", abs(total / (87 * GB) - 1) <= 0.10),
        ("DDP replica does not fit an A100", not ddp.fits),
    ]
    return _checks("mistral-memory", checks, details)


HARDWARE_EVALUATORS = (
    evaluate_nvlink_vs_pcie,
    evaluate_fabric_scaling,
    evaluate_fsdp_by_fabric,
    evaluate_zero_stages,
    evaluate_mistral_memory,
)


def hardware_claims(setting: PaperSetting) -> list[ClaimResult]:
    """Every hardware-article claim, in table order."""
    return [evaluate(setting) for evaluate in HARDWARE_EVALUATORS]
