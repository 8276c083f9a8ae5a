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

from dataclasses import replace
from types import SimpleNamespace

import pytest

from simcore.compute.roofline import ComputeModel
from simcore.engine import Simulation
from simcore.hardware import device_spec
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
from simcore.workload.types import Layer, Workload
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


def _linear(name: str, m: float, k: float, n: float) -> Layer:
    """A linear layer of known GEMM shape: per sample ``m x k`` by ``k x n``."""
    flops = 2 * m * k * n
    return Layer(
        name, "linear", 0, int(k * n), flops, 2 * flops, 2 * m * k, 2 * m * n, 2 * m * (k + n), gemm=(m, k, n)
    )


def _h100_context(workload: Workload, micro_batch: int) -> StepContext:
    timer = ComputeModel(device_spec("h100-sxm"), "bf16")
    config = TrainingConfig(global_batch=2 * micro_batch, micro_batch=micro_batch)
    return StepContext(workload, config, 2, timer, AlphaBeta(), (0, 1), (0, 1), (0,), 80 * 10**9)


def _gemm_and_norm() -> Workload:
    """One linear layer of known GEMM shape (per sample 4096 x 4096 by 4096 x 11008) and a norm."""
    m, n = 4096.0, 11008.0
    norm = Layer("norm", "norm", 0, 4096, 0.0, 0.0, 2 * m * n, 2 * m * n, 4 * m * n)
    return Workload(
        "gemm+norm", (_linear("mlp", m, 4096.0, n), norm), ("block0",), "bf16", 4096, "test stand-in"
    )


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_h100_persistent_gemms_take_two_waves_beside_a_collective(micro_batch: int) -> None:
    """On an H100 (132 SMs) beside an NVSwitch collective's 24 channels: the linear layer's kernel
    seconds (forward 32 x 86 tiles per sample, data gradient 32 x 32, weight gradient 32 x 86: every
    grid 132 blocks on 108 free SMs, two waves) count twice, the norm's 132 / 108 times."""
    workload = _gemm_and_norm()
    ctx = _h100_context(workload, micro_batch)
    timer = ctx.timer
    (lin_f, norm_f), _ = timer.layer_parts_s(workload, micro_batch, "fwd")
    (lin_b, norm_b), _ = timer.layer_parts_s(workload, micro_batch, "bwd")
    gemm, other = lin_f + lin_b, norm_f + norm_b
    expected = (2.0 * gemm + other * 132 / (132 - 24)) / (gemm + other)
    assert ctx.contention(CommCost(M, "", "nvswitch")) == pytest.approx(expected, rel=1e-12)
    # the same layers on an A100 (not persistent): the SM rule alone
    a100 = replace(ctx, timer=ComputeModel(device_spec("a100-sxm-80gb"), "bf16"), _memo={}, _layer_times={})
    assert a100.contention(CommCost(M, "", "nvswitch")) == pytest.approx(108 / (108 - 24))


def test_a_small_gemm_fits_beside_the_channels() -> None:
    """A GEMM of fewer tiles than the SMs left keeps every block resident: only the SM rule's
    share of other kernels slows (here none: the factor is 1 for the GEMM itself)."""
    # one output tile forward, data and weight gradient
    workload = Workload(
        "tiny", (_linear("tiny", 128.0, 128.0, 128.0),), ("block0",), "bf16", 128, "test stand-in"
    )
    ctx = _h100_context(workload, 1)
    assert ctx.contention(CommCost(M, "", "nvswitch")) == pytest.approx(1.0)
