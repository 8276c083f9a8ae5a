"""Max-min fair rates of flows over shared links (progressive filling, vectorised).

Max-min fairness: no flow's rate can grow without shrinking the rate of a flow that is already
no faster. Bertsekas & Gallager (Data Networks, 2nd ed., section 6.5.2) compute it by progressive
filling; this is the equivalent bottleneck form: among the flows not yet fixed, find the link whose
remaining capacity divided by its unfixed flows is smallest (the next *level*), fix every unfixed
flow crossing such a link at that level, subtract, repeat. Levels never decrease, so one pass per
distinct level is enough: thousands of flows that all get the same rate take one or two passes,
each pass a few numpy operations over the (flow, link) incidence list.

Weighted form (Bertsekas & Gallager, section 6.5.2, weighted max-min): flow ``i`` with weight
``w_i`` gets ``w_i * level`` where a plain flow gets ``level``; a link's fair level is its spare
capacity over the *weights* of its unfixed flows. A collective gives its flows weights proportional
to their bytes, so the flows of one pipelined phase progress together, as NCCL's lock-step chunks
do, and finish when the phase's most loaded link drains (the closed form); unit weights (the
default) give ordinary max-min fairness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["LEVEL_TOLERANCE", "MaxMinState", "max_min_rates"]

# Links whose fair share is within this relative distance of the smallest are saturated together,
# so that equal shares computed through different float roundings are not split into two passes.
LEVEL_TOLERANCE = 1e-12


def max_min_rates(
    entry_link: NDArray[np.intp],
    entry_flow: NDArray[np.intp],
    n_flows: int,
    capacity_Bps: NDArray[np.float64],
    weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Max-min fair rate of each flow (weighted when ``weights``, one per flow, > 0, is given).

    ``entry_link[i]`` and ``entry_flow[i]`` say that flow ``entry_flow[i]`` crosses link
    ``entry_link[i]`` (a link index into ``capacity_Bps``); every flow must cross at least one link.
    """
    return MaxMinState(capacity_Bps).solve(entry_link, entry_flow, n_flows, weights)


class MaxMinState:
    """Progressive filling that keeps its passes, so that the next solve redoes only those a change reaches.

    Passes before the first one a change can reach are the same operations on the same numbers
    as in a solve from scratch, so resuming there gives the same floats bit for bit:

    - a departing flow fixed in pass j was not on a tight link of any earlier pass (it would have
      been fixed there), so removing it only raises the shares of links that were not the minimum;
      the earlier passes keep their level, their tight links and their spare capacity;
    - an arriving flow leaves a pass unchanged when none of its links, counted with it, has a share
      within the tolerance of that pass's level (:meth:`_first_reached` checks each kept pass).

    The state holds, per pass, the spare capacity before it and its level, and per flow the pass
    that fixed it. ``solve(..., keep=..., new=...)`` says how the flows changed since the last
    solve: ``keep`` (one bool per previous flow) the survivors, in their previous order, followed
    by ``new`` arrivals, which is the order of the incidence lists passed in.
    """

    def __init__(self, capacity_Bps: NDArray[np.float64]) -> None:
        import numpy as np

        self.capacity = np.asarray(capacity_Bps, dtype=np.float64)
        self.levels: list[float] = []
        self.spares: list[NDArray[np.float64]] = []  # spare capacity before each pass, and after the last
        self.fixed_at = np.zeros(0, dtype=np.intp)
        self.rates = np.zeros(0)
        self.passes_run = 0  # passes computed over every solve (a diagnostic)

    def solve(
        self,
        entry_link: NDArray[np.intp],
        entry_flow: NDArray[np.intp],
        n_flows: int,
        weights: NDArray[np.float64] | None = None,
        *,
        keep: NDArray[np.bool_] | None = None,
        new: int | None = None,
        capacity_Bps: NDArray[np.float64] | None = None,
    ) -> NDArray[np.float64]:
        """The max-min rates of ``n_flows`` flows; incremental when ``keep`` and ``new`` are given."""
        import numpy as np

        weight = None if weights is None else np.asarray(weights, dtype=np.float64)
        if capacity_Bps is not None and len(capacity_Bps) != len(self.capacity):
            self.capacity, keep = np.asarray(capacity_Bps, dtype=np.float64), None  # new links: start over
        start = 0
        if keep is None or new is None or not self.spares:
            fixed_at = np.full(n_flows, np.iinfo(np.intp).max, dtype=np.intp)
            rates = np.zeros(n_flows)
        else:
            kept = int(np.count_nonzero(keep))
            start = len(self.levels)
            if kept < len(keep):
                start = int(self.fixed_at[~keep].min())
            fixed_at = np.concatenate(
                [self.fixed_at[keep], np.full(new, np.iinfo(np.intp).max, dtype=np.intp)]
            )
            if new and start > 0:
                start = self._first_reached(entry_link, entry_flow, fixed_at, kept, weight, start)
            rates = np.concatenate([self.rates[keep], np.zeros(new)])
            redo = fixed_at >= start
            fixed_at[redo] = np.iinfo(np.intp).max
            rates[redo] = 0.0
        if start == 0:
            spare = self.capacity.copy()
            self.levels, self.spares = [], []
            live_link, live_flow = entry_link, entry_flow
        else:
            spare = self.spares[start].copy()
            del self.levels[start:], self.spares[start:]
            alive = fixed_at[entry_flow] >= start
            live_link, live_flow = entry_link[alive], entry_flow[alive]
        self._fill(live_link, live_flow, n_flows, spare, weight, rates, fixed_at)
        self.fixed_at, self.rates = fixed_at, rates
        return rates

    def _first_reached(
        self,
        entry_link: NDArray[np.intp],
        entry_flow: NDArray[np.intp],
        fixed_at: NDArray[np.intp],
        kept: int,
        weight: NDArray[np.float64] | None,
        before: int,
    ) -> int:
        """The first kept pass (< ``before``) that an arriving flow's links would make tighter, or ``before``.

        On each link an arriving flow crosses, a pass sees the flows not fixed before it, arrivals
        included; the share there is checked against the pass's level, with a margin (weighted
        sums here are added in another order than the solve's), so a pass is kept only when it is
        surely the same.
        """
        import numpy as np

        n_links = len(self.capacity)
        touched = np.zeros(n_links, dtype=bool)
        arriving = entry_flow >= kept
        touched[entry_link[arriving]] = True
        on = touched[entry_link]
        links = np.flatnonzero(touched)
        local = np.zeros(n_links, dtype=np.intp)
        local[links] = np.arange(len(links))
        passes = np.minimum(fixed_at[entry_flow[on]], before)  # arrivals and later fixes: "past the end"
        cell = local[entry_link[on]] * (before + 1) + passes
        w = None if weight is None else weight[entry_flow[on]]
        hist = np.bincount(cell, weights=w, minlength=len(links) * (before + 1)).reshape(
            len(links), before + 1
        )
        unfixed = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # [link, pass]: flows not fixed before the pass
        spare = np.stack([s[links] for s in self.spares[:before]], axis=1)
        share = spare / unfixed[:, :before]
        margin = (1.0 + LEVEL_TOLERANCE) * (1.0 + (0.0 if weight is None else 1e-9))
        reached = (share <= np.asarray(self.levels[:before]) * margin).any(axis=0)
        hits = np.flatnonzero(reached)
        return int(hits[0]) if len(hits) else before

    def _fill(
        self,
        live_link: NDArray[np.intp],
        live_flow: NDArray[np.intp],
        n_flows: int,
        spare: NDArray[np.float64],
        weight: NDArray[np.float64] | None,
        rates: NDArray[np.float64],
        fixed_at: NDArray[np.intp],
    ) -> None:
        """Progressive filling of the flows in ``live_*`` from ``spare``, appending its passes."""
        import numpy as np

        n_links = len(spare)
        # Unit weights: link counts instead of summed weights (the same numbers: sums of ones are
        # exact), so the common case skips gathering a weight per entry on every pass.
        while len(live_link):
            self.spares.append(spare.copy())
            if weight is None:
                unfixed = np.bincount(live_link, minlength=n_links)
            else:
                unfixed = np.bincount(live_link, weights=weight[live_flow], minlength=n_links)
            used = unfixed > 0
            share = np.divide(spare, unfixed, out=np.full(n_links, np.inf), where=used)
            level = float(share.min())
            tight = share <= level * (1.0 + LEVEL_TOLERANCE)
            newly = np.zeros(n_flows, dtype=bool)
            newly[live_flow[tight[live_link]]] = True
            fixed_at[newly] = len(self.levels)
            self.levels.append(level)
            leaving = newly[live_flow]
            if weight is None:
                rates[newly] = level
                fixed = np.bincount(live_link[leaving], minlength=n_links)
            else:
                rates[newly] = level * weight[newly]
                fixed = np.bincount(live_link[leaving], weights=weight[live_flow[leaving]], minlength=n_links)
            spare -= level * fixed
            np.maximum(spare, 0.0, out=spare)
            staying = ~leaving
            live_link, live_flow = live_link[staying], live_flow[staying]
            self.passes_run += 1
        self.spares.append(spare.copy())
