"""A copy's blocks are checked to repeat before the fold extrapolates from them: hand-built sweeps."""

from __future__ import annotations

import pytest

from simcore.fastpath.repeat import block_slopes, sweeps
from simcore.step.eventfree import evaluate_plan_timed
from simcore.step.plan import PlanBuilder, StepPlan

BLOCKS = 6


def _sweep(
    compute_s: float,
    comm_s: float,
    *,
    backlog_s: float = 0.0,
    wait_at_end: bool = True,
    optimizer_s: float = 1e-3,
    ramp: float = 0.0,
    activation: float = 0.0,
) -> StepPlan:
    """A forward sweep over :data:`BLOCKS` blocks: per block one compute op (``compute_s``, and
    ``ramp`` of it more per block) keeping ``activation`` bytes, then one collective of it (``comm_s``); a
    collective of ``backlog_s`` ahead of the sweep, and an optimizer of ``optimizer_s`` that waits
    for the last collective (``wait_at_end``) or not."""
    builder = PlanBuilder("toy")
    if backlog_s:
        builder.comm("backlog", backlog_s, kind="all_reduce", size_bytes=1.0)
    last_comm = None
    for block in range(BLOCKS):
        duration = compute_s * (1 + ramp * block)
        op = builder.compute(
            f"forward of block{block}", duration, key=builder.key(block=block), kind="fwd",
            on_end=(("activations", activation),) if activation else (),
        )  # fmt: skip
        last_comm = builder.comm(f"all_reduce {block}", comm_s, kind="all_reduce", size_bytes=1.0, after=[op])
    builder.compute("optimizer step", optimizer_s, kind="optimizer", after=[last_comm] if wait_at_end else [])
    return builder.plan


def _slopes(plan: StepPlan) -> dict[int | None, float] | None:
    timed = evaluate_plan_timed(plan, capacity_bytes=80e9, comm_spans_only=True)
    return block_slopes(plan, timed, 1, range(BLOCKS))


def test_a_sweep_is_found_per_micro_batch_and_direction() -> None:
    builder = PlanBuilder("toy")
    for micro in (1, 2):
        for kind, blocks in (("fwd", range(3)), ("bwd", reversed(range(3)))):
            for block in blocks:
                builder.compute(
                    f"{kind} {block}", 1.0, key=builder.key(block=block, micro_batch=micro), kind=kind
                )
    found = sweeps(builder.plan)
    assert found == [
        (1, [(0, 0), (1, 1), (2, 2)]), (1, [(2, 3), (1, 4), (0, 5)]),
        (2, [(0, 6), (1, 7), (2, 8)]), (2, [(2, 9), (1, 10), (0, 11)]),
    ]  # fmt: skip


def test_a_steady_sweep_adds_its_compute_per_block() -> None:
    """Collectives shorter than the compute: each block adds its compute time, 3 ms."""
    assert _slopes(_sweep(3e-3, 2e-3)) == {None: pytest.approx(3e-3, rel=1e-12)}


def test_memory_one_constant_higher_per_block_still_repeats() -> None:
    """A forward window keeps its activations: the next one runs one block's bytes higher."""
    assert _slopes(_sweep(3e-3, 2e-3, activation=1e6)) == {None: pytest.approx(3e-3, rel=1e-12)}


def test_blocks_unlike_each_other_are_not_a_steady_state() -> None:
    assert _slopes(_sweep(3e-3, 2e-3, ramp=0.01)) is None


def test_a_growing_backlog_that_bounds_the_step_adds_the_comm_period() -> None:
    """Collectives of 5 ms behind 3 ms blocks, back to back, the step ending with the last: each
    block adds 5 ms, and the more blocks, the more the comm stream bounds the step."""
    assert _slopes(_sweep(3e-3, 5e-3)) == {None: pytest.approx(5e-3, rel=1e-12)}


def test_a_growing_backlog_nothing_waits_for_is_folded_only_while_it_outlasts_the_compute() -> None:
    """The same backlog, the optimizer not waiting for it: a short optimizer ends inside the
    backlog (at any depth, as the backlog only grows); a long one outlasts it, and at some depth
    the backlog would outlast the optimizer (a regime the copies do not show): refused."""
    assert _slopes(_sweep(3e-3, 5e-3, wait_at_end=False)) == {None: pytest.approx(5e-3, rel=1e-12)}
    assert _slopes(_sweep(3e-3, 5e-3, wait_at_end=False, optimizer_s=1.0)) is None


def test_a_shrinking_backlog_is_refused() -> None:
    """Collectives of 2 ms queued behind a 100 ms one: the comm stream catches up by 1 ms per
    3 ms block and is idle from some depth on, where the time per block changes."""
    assert _slopes(_sweep(3e-3, 2e-3, backlog_s=0.1)) is None
