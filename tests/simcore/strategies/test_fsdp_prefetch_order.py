"""FSDP's and ZeRO-3's prefetch look-ahead: the next distinct units of the visit order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from simcore.strategies.fsdp import _next_distinct


@given(
    order=st.lists(st.integers(0, 6), max_size=30),
    start=st.integers(0, 32),
    count=st.integers(0, 4),
)
def test_the_next_distinct_units_are_the_deduplicated_rest_of_the_order(
    order: list[int], start: int, count: int
) -> None:
    assert _next_distinct(order, start, count) == list(dict.fromkeys(order[start:]))[:count]


def test_a_unit_visited_twice_is_prefetched_once() -> None:
    # the root unit 0 is visited again after unit 3: it is looked ahead to once, and unit 5 after it
    assert _next_distinct([0, 1, 3, 3, 0, 0, 5], 2, 2) == [3, 0]
    assert _next_distinct([0, 1, 3, 3, 0, 0, 5], 3, 2) == [3, 0]
    assert _next_distinct([0, 1, 3, 3, 0, 0, 5], 4, 2) == [0, 5]
