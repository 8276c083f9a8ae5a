"""Pricing the collectives of a parallel layout: one representative group, its concurrent siblings.

Every group of one kind (all TP groups, all data-parallel groups of a stage ...) runs its
collective at the same moment. :class:`GroupPricer` prices the representative group with the
project's one cost model (:class:`simcore.step.cost.CostModel` in ``"flow"`` mode, the
discrete-event path's pricing: the simulated run, or where it has a fit the calibration profile)
and then asks whether the *sibling* groups placed on the same hosts share a link with it: if so,
the plans of all of them are merged phase by phase (the same algorithm for each, as NCCL picks one
per communicator shape) and the uncontended closed form
(:func:`simcore.collectives.closed_form.plan_cost`) of the merged plan, divided by that of the
representative alone, scales its time. Two DP groups whose ranks share one PCIe switch and one NIC
(a g5.48xlarge) thus each get half the NIC; on a DGX with a NIC per GPU nothing changes. Groups on
other hosts are left out: on a non-blocking fabric they share no link with the representative.
The scaling is the fabric's physics (no profile is read for it): a measured fit is of one group
alone, and the siblings' share of the links scales it as it scales the modelled time.

``all_to_all`` (MoE dispatch and combine, Ulysses context parallelism) is the collectives' own
(:mod:`simcore.collectives.alltoall`). Sizes follow nccl-tests (``alltoall_perf``): the buffer one
rank sends, its own share included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simcore.collectives import AlgorithmUnavailable, build_plan
from simcore.collectives.closed_form import plan_cost
from simcore.collectives.plan import Plan, concurrent, rank_hosts
from simcore.step.cost import CollectiveRequest, CostModel
from simcore.strategies.base import CommCost

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

    def __init__(
        self, topology: Topology, calibration: CalibrationProfile | None = None, mode: str = "flow"
    ) -> None:
        """``mode``: how a group alone is priced (:data:`simcore.step.cost.COST_MODES`): ``"flow"``
        simulates its flows, as the discrete-event path does; ``"closed_form"`` takes the plan's
        closed form, the same time where nothing competes (the event-free path)."""
        self.topology = topology
        self.calibration = calibration
        self.costs = CostModel(topology, calibration, mode)
        self._physics = CostModel(topology, None, mode)  # the siblings' sharing: modelled links only
        self._factors: dict[tuple[str, float, Group, tuple[Group, ...]], float] = {}
        # Every price asked for, by its arguments: a sweep asks for the same few thousand (op, size,
        # group, siblings) tens of thousands of times, and a price is a pure function of them.
        self._prices: dict[tuple[str, float, Group, tuple[Group, ...]], CommCost] = {}

    def price(self, op: str, size_bytes: float, group: Group, siblings: Sequence[Group] = ()) -> CommCost:
        """``op`` of ``size_bytes`` (nccl-tests sizes) over ``group`` while ``siblings`` run theirs."""
        key = (op, size_bytes, group, tuple(siblings))
        known = self._prices.get(key)
        if known is None:
            known = self._prices[key] = self._price(op, size_bytes, group, key[3])
        return known

    def _price(self, op: str, size_bytes: float, group: Group, siblings: tuple[Group, ...]) -> CommCost:
        if len(group) <= 1 or size_bytes <= 0:
            return CommCost(0.0)
        alone = self.costs.price(CollectiveRequest(op, float(size_bytes), group))
        if not siblings:
            return alone
        factor = self._contention(op, size_bytes, group, siblings)
        return CommCost(alone.time_s * factor, alone.bottleneck_link, alone.link_kind)

    def _contention(self, op: str, size_bytes: float, group: Group, siblings: tuple[Group, ...]) -> float:
        """Closed-form time of all the groups at once over that of ``group`` alone (>= 1)."""
        size = float(2 ** round(math.log2(max(size_bytes, 1.0))))
        key = (op, size, group, siblings)
        factor = self._factors.get(key)
        if factor is None:
            factor = self._factors[key] = self._sharing(CollectiveRequest(op, size, group, siblings))
        return factor

    def _sharing(self, request: CollectiveRequest) -> float:
        """How much slower ``request.group`` runs beside its siblings than alone (>= 1)."""
        if all(len(s) == len(request.group) for s in request.siblings):
            # same-shape groups: the collectives' own concurrent pricing (flows on shared links)
            alone_s = self._physics.price(replace(request, siblings=())).time_s
            together_s = self._physics.price_concurrent(request).time_s
            return max(1.0, together_s / alone_s) if alone_s > 0 else 1.0
        op, size = request.op, request.size_bytes
        own = build_plan(self.topology, op, size, request.group)
        plans = [own]
        for sibling in request.siblings:
            try:
                plans.append(build_plan(self.topology, op, size, sibling, algorithm=own.algorithm))
            except AlgorithmUnavailable:
                plans.append(build_plan(self.topology, op, size, sibling))
        alone_s = plan_cost(self.topology, own)[0]
        together_s = plan_cost(self.topology, _merged(plans))[0]
        return max(1.0, together_s / alone_s) if alone_s > 0 else 1.0
