"""A sweep's caches are objects it owns: bounded, keyed by identity where they say so, and shared
only by the contexts that carry the same one."""

from __future__ import annotations

from dataclasses import replace

from simcore.report import LinkBusy
from simcore.step.caches import Recent, StepCaches
from simcore.strategies import get_strategy
from simcore.strategies.base import TrainingConfig
from simcore.strategies.wrap import wrap_units
from tests.simcore.strategies.test_strategies_support import toy_context, toy_transformer


def test_recent_drops_the_least_recently_used_entry_first() -> None:
    cache: Recent[int] = Recent(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now the most recent
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)


def test_an_entry_by_identity_is_made_once_per_object_and_never_for_an_equal_one() -> None:
    cache: Recent[list[int]] = Recent(4)
    made: list[object] = []
    first, equal = [1, 2], [1, 2]

    def make(owner: list[int]) -> list[int]:
        made.append(owner)
        return list(owner)

    got = cache.of(first, ("k",), lambda: make(first))
    assert cache.of(first, ("k",), lambda: make(first)) is got
    assert cache.of(equal, ("k",), lambda: make(equal)) is not got
    assert made == [first, equal]


def test_unit_plans_are_kept_in_the_caches_given_and_recomputed_without() -> None:
    workload = toy_transformer(blocks=6)
    caches = StepCaches()
    kept = wrap_units(workload, "per-block", caches.unit_plans)
    assert wrap_units(workload, "per-block", caches.unit_plans) is kept
    assert wrap_units(workload, "per-block") == kept and wrap_units(workload, "per-block") is not kept
    assert len(caches.unit_plans) == 1


def test_copies_of_a_context_share_its_caches_and_a_fresh_context_has_its_own() -> None:
    ctx = toy_context(4, TrainingConfig(global_batch=8, micro_batch=2))
    copy = replace(ctx, config=replace(ctx.config, global_batch=16))
    assert copy.caches is ctx.caches
    assert toy_context(4, TrainingConfig(global_batch=8, micro_batch=2)).caches is not ctx.caches
    get_strategy("fsdp").build_plan(copy)
    assert len(ctx.caches.unit_plans) == 1  # the copy's plan filled the shared caches


def test_link_busy_counts_spans_per_kind_and_link_and_repeats_a_period() -> None:
    busy = LinkBusy()
    busy.add("nvlink", "a", 0.0, 1.0)
    busy.add(None, "b", 1.0, 3.0)
    busy.add("nvlink", "a", 2.0, 2.0)  # took no time: not counted
    period = LinkBusy()
    period.add("nvlink", "a", 0.0, 0.5)
    busy.add_times(period, 4)
    assert busy.by_kind == {"nvlink": 3.0, "unknown": 2.0}
    assert busy.utilisation(10.0) == {"nvlink": 0.3, "unknown": 0.2}
    assert busy.bottleneck() == "a"
    assert LinkBusy().bottleneck() == ""
