"""The one entry for turning a step context into a report: :func:`evaluate_step`.

Every caller that evaluates a data-parallel step (the what-if, the planner's data-parallel layouts,
the parallel composer's steps without a trace, the benchmarks) comes here, and the choice between
the event-free report (a probe of long accumulation, a fold of deep models:
:func:`simcore.fastpath.step.fast_step_report`) and the simulated steps
(:func:`simcore.strategies.runner.simulate_step` and :func:`~simcore.strategies.runner.report_step`)
is made here only. Callers that need the simulated steps themselves (a Chrome trace, the step times
of jittery steps, a pipeline composed from a stage's spans) ask for them with ``trace=True``.

Why here and not in :mod:`simcore.step`: the choice needs the strategies' runner and the fast
path, both of which import :mod:`simcore.step`, so :mod:`simcore.step` may not import them back;
:mod:`simcore.fastpath` already imports the runner, so the seam sits on the one-way edge
``fastpath -> strategies -> step``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from simcore.engine import Simulation
from simcore.errors import TrainsimError
from simcore.fastpath.step import fast_step_report
from simcore.report import StepReport
from simcore.strategies.base import StepContext, Strategy
from simcore.strategies.runner import StepResult, report_step, simulate_step

__all__ = ["ComputeScale", "EvaluatedStep", "evaluate_step"]

# A step's compute slowdown factor (one, or one per rank prefix), as simulate_step takes it.
ComputeScale = Callable[[Simulation, int], float | Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class EvaluatedStep:
    """A step's report, and the simulated steps when they were asked for (``trace=True``) or
    needed (the discrete-event path, per-step compute scales)."""

    report: StepReport
    step: StepResult | None


def evaluate_step(
    strategy: Strategy,
    ctx: StepContext,
    *,
    path: str,
    slowdown: float | None,
    cluster: str,
    device: str,
    peak_flops: float,
    compute_scale: ComputeScale | None = None,
    seed: int = 0,
    reuse: Hashable | None = None,
    trace: bool = False,
) -> EvaluatedStep:
    """``strategy``'s step on ``ctx`` as a report, on the engine path ``path`` (``"fast"`` or
    ``"des"``, as :func:`simcore.fastpath.path.choose_path` resolved it for ``ctx``'s cluster).

    The fast path gives the event-free report (``reuse`` shares its probes between batch sizes:
    see :mod:`simcore.fastpath.step`) for one deterministic step without a trace; anything else
    (a trace, per-step compute scales, several steps, jittered compute, the discrete-event path)
    runs :func:`~simcore.strategies.runner.simulate_step` (``seed``, ``slowdown`` and
    ``compute_scale`` as it takes them) and reports its steps."""
    if path not in ("fast", "des"):
        raise TrainsimError(f"engine path {path!r} is not resolved; evaluate_step takes fast or des")
    cfg = ctx.config
    one_step = cfg.steps <= 1 and cfg.compute_jitter_sigma <= 0
    if path == "fast" and compute_scale is None and one_step and not trace:
        report = fast_step_report(
            strategy, ctx, cluster=cluster, device=device, peak_flops=peak_flops, slowdown=slowdown,
            reuse=reuse,
        )  # fmt: skip
        return EvaluatedStep(report, None)
    step = simulate_step(strategy, ctx, seed=seed, slowdown=slowdown, compute_scale=compute_scale, path=path)
    return EvaluatedStep(report_step(step, ctx, cluster=cluster, device=device, peak_flops=peak_flops), step)
