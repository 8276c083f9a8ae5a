"""The parameter server in the what-if: its options, and the uneven-hardware branch of the advice.

The decision framework of the seed study (Ovi, arXiv 2505.12832, 2025), as its author sums it
up, ends with "if your hardware is uneven, the old parameter server design solves a problem the
newer methods do not even try to solve". :func:`uneven_hardware_advice`
checks that claim against the simulated numbers of one (cluster, GPU count) point: it compares the
fastest parameter-server mode that fits with the fastest synchronous strategy that fits, by mean
throughput over the simulated steps (a straggler's slow steps count in full, not just the p50), and
says which wins and by how much, with the asynchronous modes' staleness and its estimated accuracy
cost (:func:`simcore.staleness.penalty.estimate_accuracy_penalty`, a small-model study: a guide, not a
prediction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simcore.paramserver.config import PS_MODES
from simcore.paramserver.report import PSResult
from simcore.report import StepReport
from simcore.staleness.penalty import estimate_accuracy_penalty

__all__ = ["Verdict", "is_ps_mode", "uneven_hardware_advice"]


def is_ps_mode(name: str) -> bool:
    return name in PS_MODES


@dataclass(frozen=True, slots=True)
class Verdict:
    """The uneven-hardware comparison: whether a parameter server wins, and the line that says why."""

    ps_wins: bool
    strategy: str
    reason: str


def _penalty_note(result: PSResult) -> str:
    if result.staleness["max"] == 0:
        return "no staleness"
    estimate = estimate_accuracy_penalty(
        result.staleness["mean"], result.staleness["p99"], mitigated=result.mode == "ps-mitigated"
    )
    return (
        f"staleness mean {result.staleness['mean']:.1f}, p99 {result.staleness['p99']:.0f} versions "
        f"(estimated accuracy cost ~{estimate['penalty_points']:.1f} points, small-model study)"
    )


def uneven_hardware_advice(
    reports: Sequence[StepReport],
    ps_results: Mapping[str, PSResult],
    mean_samples_per_s: Mapping[str, float],
    why_uneven: str,
) -> Verdict | None:
    """Compare the best fitting parameter server with the best fitting synchronous strategy.

    ``reports`` are one point's reports (every strategy); ``ps_results`` the parameter-server modes'
    results by strategy name; ``mean_samples_per_s`` every strategy's mean throughput. None when
    there is nothing to compare (no parameter-server mode, or none that fits).
    """
    fitting = [r for r in reports if r.fits]
    ps = sorted(
        (r for r in fitting if r.strategy in ps_results), key=lambda r: -mean_samples_per_s[r.strategy]
    )
    sync = sorted(
        (r for r in fitting if r.strategy not in ps_results), key=lambda r: -mean_samples_per_s[r.strategy]
    )
    if not ps:
        return None
    best_ps = ps[0]
    ps_rate = mean_samples_per_s[best_ps.strategy]
    note = _penalty_note(ps_results[best_ps.strategy])
    if not sync:
        return Verdict(
            True,
            best_ps.strategy,
            f"uneven hardware ({why_uneven}) and no synchronous strategy fits: {best_ps.strategy} "
            f"runs {ps_rate:.1f} samples/s; {note}.",
        )
    best_sync = sync[0]
    sync_rate = mean_samples_per_s[best_sync.strategy]
    gain = ps_rate / sync_rate - 1.0
    if gain > 0:
        return Verdict(
            True,
            best_ps.strategy,
            f"uneven hardware ({why_uneven}): {best_ps.strategy} runs {ps_rate:.1f} samples/s, {gain * 100:.1f}% "
            f"more than {best_sync.strategy} ({sync_rate:.1f}), because no worker waits for the slowest; {note}.",
        )
    return Verdict(
        False,
        best_sync.strategy,
        f"uneven hardware ({why_uneven}), but the fastest parameter server ({best_ps.strategy}, {ps_rate:.1f} "
        f"samples/s) is {-gain * 100:.1f}% slower than {best_sync.strategy} ({sync_rate:.1f}): its push/pull "
        "traffic costs more than waiting for the slowest rank.",
    )
