"""Several communicators of the same shape running one collective at once, priced together.

HSDP all-reduces every shard among the ranks with the same local index on every node: one group per
local rank, all at once, sharing whatever NICs and fabric links their routes have in common (one
NIC per node on AWS g5: all of them; a rail-optimised DGX fabric: none). Rail groups of tensor or
expert parallelism, or any set of concurrent communicators, are the same case. Pricing them one at a
time hides that contention.

:func:`concurrent_collective_time` prices them together: the groups run the first group's algorithm
(same shape, same choice; each its best protocol), and per phase their bytes add up on shared links. Groups on
at most :data:`~simcore.collectives.selection.REPRESENTATIVE_NODES` nodes are priced exactly. Larger
ones through symmetry: every node of such groups sees the same contention, so the slowdown of each
phase's link time is measured on the groups' first nodes (all groups' loads summed, against the
first group alone) and applied to the first group's full plan; the cost does not grow with the
ranks. Where the groups share no link the result is the single group's time.
"""

from __future__ import annotations

from collections.abc import Sequence

from simcore.collectives.api import CollectiveResult, _context, price
from simcore.collectives.closed_form import merged_link_times
from simcore.collectives.cost import link_time_per_byte
from simcore.collectives.options import NcclOptions
from simcore.collectives.result import link_ref
from simcore.collectives.selection import REPRESENTATIVE_NODES
from simcore.errors import TrainsimError
from simcore.topology import Topology

__all__ = ["concurrent_collective_time"]


def _first_nodes(topology: Topology, group: Sequence[int]) -> tuple[int, ...]:
    blocks = _context(topology, group, None, None).hosts_in_order(tuple(group))
    return tuple(r for b in blocks[:REPRESENTATIVE_NODES] for r in b)


def concurrent_collective_time(
    topology: Topology,
    op: str,
    size_bytes: float,
    groups: Sequence[Sequence[int]],
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    options: NcclOptions | None = None,
) -> CollectiveResult:
    """What each of ``groups`` (equal sizes) takes when all run ``op`` of ``size_bytes`` at once."""
    if not groups:
        raise TrainsimError("concurrent_collective_time needs at least one group")
    if len({len(g) for g in groups}) != 1:
        raise TrainsimError(
            f"concurrent groups must have the same size, got {sorted({len(g) for g in groups})}"
        )
    first = price(
        topology, op, size_bytes, groups[0], algorithm=algorithm, protocol=protocol, options=options
    )
    members = list(groups) if first.plan is not None else [_first_nodes(topology, g) for g in groups]
    plans = []
    for g in members:
        # the first group's algorithm; each group's own protocol (a GPU whose NIC sits behind the
        # CPU may not run LL128 where the first group's can)
        plan = price(topology, op, size_bytes, g, algorithm=first.algorithm, options=options).plan
        if plan is None:
            raise TrainsimError(f"concurrent {op} groups could not be laid out on their first nodes")
        plans.append(plan)
    merged = merged_link_times(topology, plans)
    alone = [link_time_per_byte(topology, p) for p in plans[0].phases]
    total = 0.0
    worst, worst_edge = -1.0, None
    for cost, (together, edge), (single, _) in zip(first.costs, merged, alone, strict=True):
        shared = cost.link_s * (together / single if single > 0 else 1.0)
        total += cost.latency_s + max(shared, cost.engine_s)
        if edge is not None and shared > worst:
            worst, worst_edge = shared, edge
    return CollectiveResult(op, first.algorithm, first.size_bytes, first.group, total, total,
                            link_ref(topology, worst_edge), 0, first.protocol)  # fmt: skip
