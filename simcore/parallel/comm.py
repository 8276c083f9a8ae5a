"""Pricing the collectives of a parallel layout: one representative group, its concurrent siblings.

Every group of one kind (all TP groups, all data-parallel groups of a stage ...) runs its
collective at the same moment. :class:`GroupPricer` prices the representative group with the
project's collective model (:func:`simcore.strategies.runner.collective_model`: the discrete-event
run, or a calibration profile) and then asks whether the *sibling* groups placed on the same hosts
share a link with it: if so, the plans of all of them are merged phase by phase (the same
algorithm for each, as NCCL picks one per communicator shape) and the uncontended closed form
(:func:`simcore.collectives.closed_form.plan_cost`) of the merged plan, divided by that of the
representative alone, scales its time. Two DP groups whose ranks share one PCIe switch and one NIC
(a g5.48xlarge) thus each get half the NIC; on a DGX with a NIC per GPU nothing changes. Groups on
other hosts are left out: on a non-blocking fabric they share no link with the representative.

``all_to_all`` (MoE dispatch and combine, Ulysses context parallelism): while the collective
model has no all-to-all of its own, it is priced as what it moves: every rank sends ``(n-1)/n`` of
its buffer, ``1/n`` to each peer, which is exactly the traffic of the direct (one-shot) all-gather
of the same buffer (``simcore.collectives.direct``), up to 64 ranks; beyond, the ring all-gather,
which moves the same bytes per rank. Sizes follow nccl-tests (``alltoall_perf``): the buffer one
rank sends, its own share included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simcore.collectives import OPS, AlgorithmUnavailable, build_plan, collective_time
from simcore.collectives.closed_form import plan_cost
from simcore.collectives.concurrency import concurrent_collective_time
from simcore.collectives.direct import MAX_DIRECT_RANKS
from simcore.collectives.plan import Plan, concurrent, rank_hosts
from simcore.collectives.result import describe_link
from simcore.strategies.base import CommCost
from simcore.strategies.runner import collective_model

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.topology import Topology

__all__ = ["GroupPricer", "sharing_groups"]

Group = tuple[int, ...]


def sharing_groups(topology: Topology, group: Group, others: Sequence[Group]) -> list[Group]:
    """The groups among ``others`` with a rank on one of ``group``'s hosts (the ones that can
    share a link with it on a non-blocking fabric)."""
    if not group:
        return []
    hosts = set(rank_hosts(topology, group))
    return [g for g in others if hosts.intersection(rank_hosts(topology, g))]


def _merged(plans: Sequence[Plan]) -> Plan:
    first = plans[0]
    if all(len(p.phases) == len(first.phases) for p in plans):
        phases = tuple(
            concurrent(first.phases[i].label, [p.phases[i] for p in plans]) for i in range(len(first.phases))
        )
    else:  # different shapes: run everything as one phase (an upper bound on sharing)
        phases = (
            concurrent(
                "merged",
                [ph for p in plans for ph in p.phases],
            ),
        )
    return Plan(first.op, first.algorithm, first.size_bytes, first.group, phases)


class GroupPricer:
    """Collective times for the groups of one layout on one topology (cached)."""

    def __init__(self, topology: Topology, calibration: CalibrationProfile | None = None) -> None:
        self.topology = topology
        self.calibration = calibration
        self._alone = collective_model(topology, calibration)
        self._factors: dict[tuple[str, float, Group, tuple[Group, ...]], float] = {}
        self._pinned: dict[tuple[str, float, Group, str], CommCost] = {}

    def price(self, op: str, size_bytes: float, group: Group, siblings: Sequence[Group] = ()) -> CommCost:
        """``op`` of ``size_bytes`` (nccl-tests sizes) over ``group`` while ``siblings`` run theirs."""
        if len(group) <= 1 or size_bytes <= 0:
            return CommCost(0.0)
        if op == "all_to_all" and op not in OPS:
            alone = self._all_to_all(size_bytes, group)
        else:
            alone = self._alone(op, float(size_bytes), group)
        if not siblings:
            return alone
        factor = self._contention(op, size_bytes, group, tuple(siblings))
        return CommCost(alone.time_s * factor, alone.bottleneck_link, alone.link_kind)

    def _all_to_all(self, size_bytes: float, group: Group) -> CommCost:
        algorithm = "direct" if len(group) <= MAX_DIRECT_RANKS else "ring"
        size = float(2 ** math.ceil(math.log2(size_bytes))) if size_bytes >= 1024 else float(size_bytes)
        key = ("all_gather", size, group, algorithm)
        cost = self._pinned.get(key)
        if cost is None:
            result = collective_time(
                self.topology, "all_gather", size, group, algorithm=algorithm, calibration=self.calibration
            )
            link = result.bottleneck
            kind = link.kind if link is not None else ""
            cost = self._pinned[key] = CommCost(float(result.time_s), describe_link(link), kind)
        return CommCost(cost.time_s * size_bytes / size, cost.bottleneck_link, cost.link_kind)

    def _contention(self, op: str, size_bytes: float, group: Group, siblings: tuple[Group, ...]) -> float:
        """Closed-form time of all the groups at once over that of ``group`` alone (>= 1)."""
        size = float(2 ** round(math.log2(max(size_bytes, 1.0))))
        key = (op, size, group, siblings)
        factor = self._factors.get(key)
        if factor is None:
            real_op, pinned = (
                ("all_gather", "direct" if len(group) <= MAX_DIRECT_RANKS else "ring")
                if (op == "all_to_all" and op not in OPS)
                else (op, None)
            )
            if all(len(s) == len(group) for s in siblings):
                # same-shape groups: the collectives' own concurrent pricing (flows on shared links)
                alone_s = collective_time(self.topology, real_op, size, group, algorithm=pinned).time_s
                together_s = concurrent_collective_time(
                    self.topology, real_op, size, [group, *siblings], algorithm=pinned
                ).time_s
                factor = max(1.0, together_s / alone_s) if alone_s > 0 else 1.0
                self._factors[key] = factor
                return factor
            own = build_plan(self.topology, real_op, size, group, algorithm=pinned)
            plans = [own]
            for sibling in siblings:
                try:
                    plans.append(build_plan(self.topology, real_op, size, sibling, algorithm=own.algorithm))
                except AlgorithmUnavailable:
                    plans.append(build_plan(self.topology, real_op, size, sibling))
            alone_s = plan_cost(self.topology, own)[0]
            together_s = plan_cost(self.topology, _merged(plans))[0]
            factor = max(1.0, together_s / alone_s) if alone_s > 0 else 1.0
            self._factors[key] = factor
        return factor
