"""The what-if's points over parallel layouts: every (cluster, strategy, layout, GPU count) point.

:func:`simcore.whatif.sweep.run_what_if` given ``layouts`` runs :func:`run_layouts`, which returns
the what-if's :class:`~simcore.whatif.result.WhatIfResult` (so the same table, JSON, plots and trace apply) with :class:`~simcore.parallel.report.ParallelStepReport`
records. Scaling efficiency is against the same data-parallel strategy on one GPU, as the what-if
always measures it. The recommendation weighs every (strategy, layout) that was given as its own
candidate, named ``"<strategy> <layout>"`` (e.g. ``"zero1 dp16 tp8 pp8"``): the fastest that fits,
or the smallest peak when none does (rules 3-4 of :mod:`simcore.whatif.recommend`; rule 2's
preference for plain DDP applies only among pure data-parallel rows).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError
from simcore.fastpath.path import DEFAULT_ENGINE_PATH, check_engine_path
from simcore.parallel.cache import ComposeCache
from simcore.parallel.layout import ParallelLayout, check_layout
from simcore.parallel.options import ParallelOptions
from simcore.parallel.report import ParallelStepReport
from simcore.parallel.step import simulate_parallel_step
from simcore.strategies import strategy_names
from simcore.topology import ClusterLoader
from simcore.whatif.recommend import Recommendation, recommend
from simcore.whatif.result import WhatIfResult, counted_progress, gpu_counts, load_topologies

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.strategies.base import TrainingConfig
    from simcore.workload.types import Workload

__all__ = ["layouts_from_lists", "point_label", "run_layouts"]


def layouts_from_lists(
    tp: Sequence[int], pp: Sequence[int], cp: Sequence[int], ep: Sequence[int], vpp: Sequence[int]
) -> list[ParallelLayout]:
    """Every combination of the given degrees, in order (a what-if over several layouts)."""
    return [
        ParallelLayout(tp=a, pp=b, cp=c, ep=d, vpp=v)
        for a, b, c, d, v in itertools.product(tp, pp, cp, ep, vpp)
    ]


def point_label(report: ParallelStepReport) -> str:
    """``"ddp dp16 tp8 pp8"``: how the table and the recommendation name a (strategy, layout) row
    (just the strategy for pure data parallelism)."""
    plain = not report.layout or report.layout == f"dp{report.dp}"
    return report.strategy if plain else f"{report.strategy} {report.layout}"


def run_layouts(
    workload: Workload,
    clusters: Sequence[str],
    gpus: Sequence[int],
    *,
    loader: ClusterLoader,
    layouts: Sequence[ParallelLayout],
    options: ParallelOptions = ParallelOptions(),  # noqa: B008 - frozen
    strategies: Sequence[str] | None = None,
    config: TrainingConfig,
    calibration: CalibrationProfile | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    engine_path: str = DEFAULT_ENGINE_PATH,
) -> WhatIfResult:
    """Simulate every point; reports are ordered cluster, strategy, layout, gpus.

    ``engine_path`` as :func:`~simcore.parallel.step.simulate_parallel_step` takes it; the points
    share one :class:`~simcore.parallel.cache.ComposeCache` for the run.
    """
    check_engine_path(engine_path)
    names = list(strategies) if strategies else strategy_names()
    unknown = [n for n in names if n not in strategy_names()]
    if unknown:
        raise TrainsimError(
            f"parallel layouts combine with the synchronous strategies ({', '.join(strategy_names())}); "
            f"{unknown[0]!r} is not one of them"
        )
    counts = gpu_counts(gpus)
    for n, layout in itertools.product(counts, layouts):
        check_layout(layout, n, workload, cp_kind=options.cp_kind)
    result = WhatIfResult([], [])
    tick = counted_progress(len(clusters) * len(names) * (len(layouts) * len(counts) + 1), progress)
    run = functools.partial(
        simulate_parallel_step, workload, config, calibration=calibration, seed=seed, path=engine_path,
        cache=ComposeCache(),
    )  # fmt: skip
    for cluster in clusters:
        topologies = load_topologies(result, cluster, counts, loader, calibration)
        for name in names:
            base = run(topologies[1], name, ParallelLayout(), options, cluster=cluster).report
            tick(f"{cluster} {name} 1 GPU (baseline)")
            for layout, n in itertools.product(layouts, counts):
                point = run(topologies[n], name, layout, options, cluster=cluster)
                rep = point.report
                efficiency = rep.samples_per_s / (n * base.samples_per_s)
                result.reports.append(replace(rep, scaling_efficiency=efficiency, baseline_fits=base.fits))
                result.steps[(cluster, point_label(rep), n)] = point.step
                tick(f"{cluster} {point_label(rep)} {n} GPUs")
        point_reports = [
            r
            for r in result.reports
            if isinstance(r, ParallelStepReport) and r.cluster == cluster and r.gpus == counts[-1]
        ]
        result.recommendations.append(_recommend(point_reports))
    return result


def _recommend(reports: Sequence[ParallelStepReport]) -> Recommendation:
    """The decision rules over (strategy, layout) candidates (see the module docstring)."""
    return recommend([replace(r, strategy=point_label(r)) for r in reports])
