"""Compute/communication contention: a two-operation plan whose end is computed by hand.

One compute operation of C seconds and one collective of M seconds start together on a rank:

- uniform (``slowdown`` = s): compute runs at 1/s while the collective runs, the collective at its
  own speed; the collective ends at M and compute at ``M + C - M / s``;
- per collective (``slowdown=None``): compute runs at 1/f of the collective's own factor
  ``f = sms / (sms - channels)`` (NCCL runs one block per channel, each holding an SM; the channels
  by link kind in ``data/efficiency.yaml``, ``contention``), and the collective at 1/c while compute
  runs beside it (``comm_slowdown_under_compute``): it ends at ``M c``, compute at
  ``M c + C - M c / f``.

Both evaluators (SimPy's ``run_plan`` and the event-free ``evaluate_plan``) must give these times.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simcore.engine import Simulation
from simcore.step.des import run_plan
from simcore.step.eventfree import evaluate_plan
from simcore.step.plan import PlanBuilder, PlanRun, StepPlan
from simcore.strategies.base import (
    DEFAULT_COMM_COMPUTE_SLOWDOWN,
    CommCost,
    StepContext,
    TrainingConfig,
    contention_table,
)
from simcore.strategies.runner import comm_slowdown_under_compute, simulate_step
from tests.simcore.strategies.test_strategies_support import AlphaBeta, RateTimer, toy_transformer

C, M = 1.0, 0.4  # compute and collective seconds
A100_SMS = 108  # NVIDIA A100 whitepaper: 108 SMs
CONFIGURED = (
    1.10  # efficiency.yaml contention.comm_slowdown_under_compute; base.DEFAULT_COMM_COMPUTE_SLOWDOWN
)


def _plan(contention: float = 1.0) -> StepPlan:
    builder = PlanBuilder("hand")
    builder.compute("layer", C, kind="fwd")
    builder.comm("all_reduce", M, kind="all_reduce", size_bytes=1e6, contention=contention)
    return builder.plan


def _both(plan: StepPlan, slowdown: float | None, comm_slowdown: float = 1.0) -> list[PlanRun]:
    des = run_plan(Simulation(), plan, capacity_bytes=1e12, slowdown=slowdown, comm_slowdown=comm_slowdown)
    fast = evaluate_plan(plan, capacity_bytes=1e12, slowdown=slowdown, comm_slowdown=comm_slowdown)
    return [des, fast]


def _ends(run: PlanRun) -> dict[str, float]:
    return {span.kind: span.end_s for span in run.spans}


def test_configured_factors() -> None:
    unknown_sms = DEFAULT_COMM_COMPUTE_SLOWDOWN  # compute beside a collective where SMs are unknown
    comm_under_compute = float(contention_table()["comm_slowdown_under_compute"])
    assert (unknown_sms, comm_under_compute) == pytest.approx((CONFIGURED, CONFIGURED))


@pytest.mark.parametrize("s", [1.0, CONFIGURED, 1.5])
def test_uniform_slowdown_by_hand(s: float) -> None:
    for run in _both(_plan(), slowdown=s):
        ends = _ends(run)
        assert ends["all_reduce"] == pytest.approx(M, rel=1e-12)
        assert ends["fwd"] == pytest.approx(M + C - M / s, rel=1e-12)
        assert run.step_time_s == pytest.approx(M + C - M / s, rel=1e-12)


def test_per_collective_contention_by_hand() -> None:
    f, c = 108 / (108 - 16), CONFIGURED
    for run in _both(_plan(f), slowdown=None, comm_slowdown=c):
        ends = _ends(run)
        assert ends["all_reduce"] == pytest.approx(M * c, rel=1e-12)
        assert ends["fwd"] == pytest.approx(M * c + C - M * c / f, rel=1e-12)


class _GpuTimer(RateTimer):
    """The stand-in timer on a device whose SM count is known (as ComputeModel's curve has it)."""

    curve = SimpleNamespace(sms=A100_SMS)


def _context(timer: RateTimer, nics_per_node: int = 0) -> StepContext:
    config = TrainingConfig(global_batch=2, micro_batch=1)
    return StepContext(
        toy_transformer(), config, 2, timer, AlphaBeta(), (0, 1), (0, 1), (0,), 80 * 10**9,
        nics_per_node=nics_per_node,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("link_kind", "nics", "channels"),
    [
        ("nvlink", 0, 16),  # 16 channels on NVLink nodes
        ("nvswitch", 0, 24),  # 24 rings on an NVSwitch node (NCCL INFO "Channel 23/24")
        ("ib", 0, 16),  # a network link, the host's NICs unknown
        ("ib", 4, 2 * 4),  # NCCL_NCHANNELS_PER_NET_PEER = 2 per NIC (nccl.yaml bandwidth.channels)
        ("ib", 32, 32),  # at most MAXCHANNELS = 32
    ],
)
def test_the_sm_rule(link_kind: str, nics: int, channels: int) -> None:
    ctx = _context(_GpuTimer(), nics)
    assert ctx.contention(CommCost(M, "", link_kind)) == pytest.approx(A100_SMS / (A100_SMS - channels))


def test_without_known_sms_the_default_slowdown_and_no_comm_slowdown() -> None:
    ctx = _context(RateTimer())
    assert ctx.contention(CommCost(M, "", "nvlink")) == pytest.approx(CONFIGURED)
    assert comm_slowdown_under_compute(ctx) == 1.0
    assert comm_slowdown_under_compute(_context(_GpuTimer())) == pytest.approx(CONFIGURED)


class _TwoOps:
    """A strategy whose plan is the hand-built one, its collective's factor from the context."""

    name = "hand"
    description = "one compute operation beside one collective"

    def build_plan(self, ctx: StepContext) -> StepPlan:
        return _plan(ctx.contention(CommCost(M, "", "nvlink")))


@pytest.mark.parametrize("path", ["des", "fast"])
def test_a_step_applies_both_directions(path: str) -> None:
    """Through the runner: f from the SM rule (NVLink, 16 of 108 SMs), c from the data file."""
    f, c = A100_SMS / (A100_SMS - 16), CONFIGURED
    result = simulate_step(_TwoOps(), _context(_GpuTimer()), slowdown=None, path=path)
    assert result.run.step_time_s == pytest.approx(M * c + C - M * c / f, rel=1e-12)
