"""Where each ratio claim of the seed study holds: the region (fabric, model, GPU count) in which the
simulator reproduces it, next to the reading the report uses now (issue 21, last validation rule).

The report judges a claim at one reading of the setting (8 GPUs of each cluster, the study's CNNs).
The sources give no GPU count, so a claim the simulator "disagrees" with at 8 GPUs may hold at 2, and
one it "agrees" with may hold on only one fabric. :func:`claim_regions` sweeps the axes the sources
leave open and applies the claim's own rule (:func:`~experiments.reproduce_paper.claims.judge`) to
each point alone; :func:`format_regions` lists, per fabric and model, the GPU counts where it agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from experiments.reproduce_paper.claims import AGREES, CLAIMS, PaperSetting, judge

__all__ = ["REGION_CLAIMS", "RegionPoint", "RegionSweep", "claim_regions", "format_regions"]

# claim -> (strategy and GPUs of the numerator, of the denominator (0 = the point's count), metric)
REGION_CLAIMS: dict[str, tuple[tuple[str, int], tuple[str, int], str]] = {
    "ddp-vs-fsdp": (("ddp", 0), ("fsdp", 0), "samples_per_s"),
    "ddp-vs-1gpu": (("ddp", 0), ("ddp", 1), "samples_per_s"),
    "fsdp-memory": (("ddp", 0), ("fsdp", 0), "peak_memory_bytes"),
}
StepFn = Callable[[PaperSetting, str, str, str, int], Any]  # (setting, cluster, model, strategy, gpus)


@dataclass(frozen=True, slots=True)
class RegionSweep:
    """The axes swept: fabrics (cluster presets), models and GPU counts."""

    clusters: tuple[str, ...] = ("dgx-a100", "g5.48xlarge")
    # the study's own CNNs, smallest to largest (15 M to 196 M parameters)
    models: tuple[str, ...] = ("vgg16-cifar10", "resnet50-cifar10", "convnext-large-cifar10")
    gpus: tuple[int, ...] = (2, 4, 8, 16, 32)


@dataclass(frozen=True, slots=True)
class RegionPoint:
    """One point of a claim's sweep: the ratio the claim speaks of there, and the rule's verdict."""

    claim_id: str
    cluster: str
    model: str
    gpus: int
    value: float
    verdict: str


def claim_regions(setting: PaperSetting, sweep: RegionSweep, step: StepFn) -> list[RegionPoint]:
    """Every claim of :data:`REGION_CLAIMS` at every point of ``sweep``. ``step`` runs one point
    (the report's own, so a point at the report's reading is the report's number); the global
    batch is one micro-batch per GPU of the point, as in the report."""
    out = []
    for claim_id, ((top, _), (bottom, fixed), metric) in REGION_CLAIMS.items():
        for cluster in sweep.clusters:
            for model in sweep.models:
                for n in sweep.gpus:
                    at = replace(setting, gpus=n)
                    a = getattr(step(at, cluster, model, top, n), metric)
                    b = getattr(step(at, cluster, model, bottom, fixed or n), metric)
                    out.append(
                        RegionPoint(claim_id, cluster, model, n, a / b, judge(CLAIMS[claim_id], [a / b]))
                    )
    return out


def _where(counts: Sequence[int]) -> str:
    """``agrees at 2, 4 GPUs``, or ``agrees nowhere``."""
    return f"agrees at {', '.join(str(n) for n in counts)} GPUs" if counts else "agrees nowhere"


def format_regions(points: Sequence[RegionPoint], setting: PaperSetting, sweep: RegionSweep) -> str:
    """Per claim: the reading used now, then per fabric and model the GPU counts where it agrees."""
    lines = ["Where each claim holds (its rule applied to each point alone)"]
    for claim_id in REGION_CLAIMS:
        mine = [p for p in points if p.claim_id == claim_id]
        held = sum(1 for p in mine if p.verdict == AGREES)
        lines += ["", f"[{claim_id}] reading used now: {setting.gpus} GPUs of {', '.join(sweep.clusters)}; "
                      f"agrees at {held} of {len(mine)} points"]  # fmt: skip
        for cluster in sweep.clusters:
            for model in sweep.models:
                row = [p for p in mine if p.cluster == cluster and p.model == model]
                agree = [p.gpus for p in row if p.verdict == AGREES]
                values = ", ".join(f"{p.gpus}: {p.value:.2f}x" for p in row)
                lines.append(f"  {cluster} {model}: {_where(agree)} ({values})")
    return "\n".join(lines) + "\n"
