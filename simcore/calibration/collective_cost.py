"""The one rule by which a calibration profile prices a collective: its fastest measured protocol.

``python -m calibrate.fit`` writes, per (operation, ranks, scope), an overall alpha-beta line and,
where the sweep shows NCCL switching protocols, one line per protocol
(:mod:`simcore.calibration.profile`). A collective of ``S`` bytes (nccl-tests' size) on a measured
shape takes the fastest of those lines, ``min_p(alpha_p + busbw_factor(op, n) * S / busbw_p)``
(:meth:`~simcore.calibration.profile.CollectiveFit.protocol_time`): NCCL itself runs the fastest
protocol for the size, so the overall line, a compromise across protocols, overprices small
messages (LL) severalfold. The scope is ``intra_node`` when every rank of the group is on one host,
else ``inter_node``, as the profile's fits are keyed.

Every pricing front end reaches this through :class:`simcore.step.cost.CostModel`;
:func:`simcore.collectives.collective_time` calls it too, so there is one rule. It imports nothing
from the collectives (which import it): it sits with the profile it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile
    from simcore.topology import Topology

__all__ = ["CalibratedCost", "calibrated_cost", "group_scope"]


@dataclass(frozen=True, slots=True)
class CalibratedCost:
    """A measured collective time: the fastest protocol's line of the profile's fit for the shape."""

    time_s: float
    protocol: str  # the protocol whose line answered ("": the fit has one overall line only)
    scope: str  # "intra_node" or "inter_node"

    @property
    def label(self) -> str:
        """What limits the collective, in the place a modelled cost names its bottleneck link."""
        return f"calibrated ({self.scope})"


def group_scope(topology: Topology, group: Sequence[int]) -> str:
    """``"intra_node"`` if every rank of ``group`` is on one host, else ``"inter_node"``."""
    return "intra_node" if len({topology.host_of_rank(r) for r in group}) == 1 else "inter_node"


def calibrated_cost(
    topology: Topology, op: str, size_bytes: float, group: Sequence[int], calibration: CalibrationProfile
) -> CalibratedCost | None:
    """The profile's measured time for ``op`` of ``size_bytes`` over ``group``; None where it has no fit."""
    scope = group_scope(topology, group)
    fit = calibration.collective_fit(op, len(group), scope)
    if fit is None:
        return None
    time_s, protocol = fit.protocol_time(size_bytes)
    return CalibratedCost(time_s, protocol, scope)
