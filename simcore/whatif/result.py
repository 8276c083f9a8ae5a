"""What a what-if run returns (:class:`WhatIfResult`), and the steps every what-if run shares:
its GPU counts, its progress count, its clusters loaded at each count.

Kept apart from the driver (:mod:`simcore.whatif.sweep`) so that the layouts' points
(:mod:`simcore.whatif.layouts`), which the driver calls, build the same result without importing it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity
from simcore.errors import TrainsimError
from simcore.paramserver import PSResult
from simcore.report import StepReport
from simcore.strategies.runner import StepResult
from simcore.topology import ClusterLoader, Topology
from simcore.whatif.recommend import Recommendation

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = ["WhatIfResult", "counted_progress", "gpu_counts", "load_topologies"]


@dataclass(slots=True)
class WhatIfResult:
    """Reports of every point, a recommendation per cluster, and the simulated steps (for traces)."""

    reports: list[StepReport]
    recommendations: list[Recommendation]
    steps: dict[tuple[str, str, int], StepResult] = field(default_factory=dict)
    topologies: dict[tuple[str, int], Topology] = field(default_factory=dict)
    ps_results: dict[tuple[str, str, int], PSResult] = field(default_factory=dict)
    heterogeneity: Heterogeneity = NO_HETEROGENEITY
    # (cluster, gpus) -> "fast" or "des": the engine path the synchronous strategies took there
    engine_paths: dict[tuple[str, int], str] = field(default_factory=dict)

    def records(self) -> list[dict[str, object]]:
        """JSON-ready records in report order; parameter-server points carry their staleness fields."""
        out: list[dict[str, object]] = []
        for report in self.reports:
            ps = self.ps_results.get((report.cluster, report.strategy, report.gpus))
            out.append(replace(ps, step=report).to_record() if ps is not None else report.to_record())
        return out


def gpu_counts(gpus: Sequence[int]) -> list[int]:
    """The distinct GPU counts of a sweep, ascending; one clear error when any is below 1."""
    counts = sorted(set(gpus))
    if not counts or counts[0] < 1:
        raise TrainsimError(f"--gpus must list positive counts, got {list(gpus)}")
    return counts


def counted_progress(total: int, progress: Callable[[str], None] | None) -> Callable[[str], None]:
    """A callback that prefixes each finished point with ``[done/total]`` for ``progress``."""
    done = [0]

    def tick(line: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(f"[{done[0]}/{total}] {line}")

    return tick


def load_topologies(
    result: WhatIfResult,
    cluster: str,
    counts: Sequence[int],
    loader: ClusterLoader,
    calibration: CalibrationProfile | None,
) -> dict[int, Topology]:
    """``cluster`` at 1 GPU (the scaling baseline) and at each count, recorded in ``result`` and
    checked against ``calibration`` at the largest count."""
    topologies = {n: loader(cluster, gpus=n) for n in sorted({1, *counts})}
    result.topologies.update({(cluster, n): t for n, t in topologies.items()})
    if calibration is not None:
        calibration.check_against(topologies[counts[-1]], strict=False)
    return topologies
