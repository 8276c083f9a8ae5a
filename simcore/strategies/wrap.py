"""FSDP wrapping units: which layers are gathered and resharded together, and where they split blocks.

A unit is a set of layers whose parameters FSDP all-gathers (before forward and again before
backward) and reduce-scatters together. Unit 0 is the *root*: the layers no policy wraps
(embeddings, final norm, head), gathered at the start of forward and kept until their backward, as
FSDP's root module does. Policies:

- ``"per-block"`` (default): one unit per block (transformer block, CNN stage);
- ``"every-N-layers"``: N consecutive block layers per unit, counting layers across blocks;
- ``"every-N-blocks"``: N consecutive blocks per unit;
- a tuple of layer indices: the layers where units begin (layers before the first index and
  layers outside blocks stay in the root).

A unit whose first (forward) or last (backward) layer sits inside a block, rather than on the
block's edge, *splits* the block: the shard-boundary lesson of the seed
study (Ovi, arXiv 2505.12832, 2025), as its author reports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from simcore.errors import TrainsimError
from simcore.step.caches import Recent
from simcore.workload.types import Workload

__all__ = ["UnitPlan", "bucket_units", "parse_wrap", "wrap_units"]

_EVERY = re.compile(r"every-(\d+)-(layers?|blocks?)")


@dataclass(frozen=True, slots=True)
class UnitPlan:
    """Unit id per layer, plus the units that break prefetch because they start inside a block."""

    unit_of_layer: tuple[int, ...]
    units: tuple[tuple[int, ...], ...]
    has_root: bool
    split_blocks: dict[int, tuple[int, ...]]
    mid_block_forward: frozenset[int]
    mid_block_backward: frozenset[int]


def parse_wrap(text: str) -> str | tuple[int, ...]:
    """A wrap policy from the command line: a policy name or a comma list of layer indices."""
    text = text.strip()
    if text == "per-block" or _EVERY.fullmatch(text):
        return text
    try:
        starts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise TrainsimError(
            f"wrap policy {text!r} not understood; use per-block, every-N-layers, "
            "every-N-blocks or a comma list of layer indices"
        ) from None
    if not starts:
        raise TrainsimError("wrap policy: the list of layer indices is empty")
    return starts


def _raw_units(workload: Workload, wrap: str | tuple[int, ...]) -> list[int]:
    layers = workload.layers
    if wrap == "per-block":
        return [layer.block + 1 for layer in layers]
    if isinstance(wrap, tuple):
        bad = [i for i in wrap if not 0 <= i < len(layers)]
        if bad:
            raise TrainsimError(
                f"wrap: layer index {bad[0]} is outside 0..{len(layers) - 1} of {workload.name}"
            )
        starts = sorted(set(wrap))
        unit_ids, current = [], 0
        for index, layer in enumerate(layers):
            if index in starts:
                current = starts.index(index) + 1
            unit_ids.append(current if layer.block >= 0 else 0)
        return unit_ids
    match = _EVERY.fullmatch(wrap)
    if not match or int(match[1]) < 1:
        raise TrainsimError(
            f"wrap policy {wrap!r} not understood; use per-block, every-N-layers, every-N-blocks "
            "(N >= 1) or a tuple of layer indices"
        )
    size = int(match[1])
    if match[2].startswith("block"):
        return [layer.block // size + 1 if layer.block >= 0 else 0 for layer in layers]
    unit_ids, position = [], 0
    for layer in layers:
        if layer.block >= 0:
            unit_ids.append(position // size + 1)
            position += 1
        else:
            unit_ids.append(0)
    return unit_ids


def _plan(workload: Workload, raw: list[int], has_root: bool) -> UnitPlan:
    # Renumber units in order of first use, the root (raw id 0 when has_root) first.
    first_use = list(dict.fromkeys(raw))
    if has_root:
        first_use = [0] + [u for u in first_use if u != 0]
    renumber = {old: new for new, old in enumerate(first_use)}
    unit_of = tuple(renumber[u] for u in raw)
    grouped: list[list[int]] = [[] for _ in first_use]
    for index, unit in enumerate(unit_of):
        grouped[unit].append(index)
    units = tuple(tuple(g) for g in grouped)
    layers = workload.layers
    members_of: dict[int, set[int]] = {}
    for index, layer in enumerate(layers):
        if layer.block >= 0:
            members_of.setdefault(layer.block, set()).add(unit_of[index])
    split = {block: tuple(sorted(m)) for block, m in sorted(members_of.items()) if len(m) > 1}
    fwd, bwd = set(), set()
    for unit, members in enumerate(units):
        if not members:
            continue
        first, last = members[0], members[-1]
        if first > 0 and layers[first].block >= 0 and layers[first - 1].block == layers[first].block:
            fwd.add(unit)
        if (
            last + 1 < len(layers)
            and layers[last].block >= 0
            and layers[last + 1].block == layers[last].block
        ):
            bwd.add(unit)
    return UnitPlan(unit_of, units, has_root, split, frozenset(fwd), frozenset(bwd))


def _remembered(
    workload: Workload,
    policy: tuple[Hashable, ...],
    make: Callable[[], UnitPlan],
    known: Recent[object] | None,
) -> UnitPlan:
    """``make()``, kept in ``known`` by (workload, policy) when given: a sweep plans the same units
    for every configuration (:attr:`simcore.step.caches.StepCaches.unit_plans`)."""
    if known is None:
        return make()
    return known.of(workload, policy, make)  # type: ignore[return-value]


def wrap_units(
    workload: Workload, wrap: str | tuple[int, ...], known: Recent[object] | None = None
) -> UnitPlan:
    """FSDP's units for ``wrap``; unit 0 is the root when some layers stay unwrapped (kept in
    ``known`` when given)."""
    return _remembered(workload, ("wrap", wrap), lambda: _wrap_units(workload, wrap), known)


def _wrap_units(workload: Workload, wrap: str | tuple[int, ...]) -> UnitPlan:
    raw = _raw_units(workload, wrap)
    has_root = 0 in raw
    if not has_root:
        raw = [u - 1 for u in raw]
    return _plan(workload, raw, has_root)


def bucket_units(workload: Workload, params_per_unit: int, known: Recent[object] | None = None) -> UnitPlan:
    """DeepSpeed ZeRO-3's gather groups: consecutive layers until ``params_per_unit`` is reached
    (kept in ``known`` when given).

    DeepSpeed gathers parameters in the traced execution order in prefetch buckets, regardless of
    module boundaries, so a group may end inside a block without breaking prefetch.
    """
    return _remembered(
        workload, ("bucket", params_per_unit), lambda: _bucket_units(workload, params_per_unit), known
    )


def _bucket_units(workload: Workload, params_per_unit: int) -> UnitPlan:
    raw, current, filled = [], 0, 0
    for layer in workload.layers:
        raw.append(current)
        filled += layer.params
        if filled >= params_per_unit:
            current, filled = current + 1, 0
    plan = _plan(workload, raw, has_root=False)
    return UnitPlan(plan.unit_of_layer, plan.units, False, plan.split_blocks, frozenset(), frozenset())
