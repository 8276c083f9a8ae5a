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

from typing import TYPE_CHECKING, Any

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["INCREMENTAL_MIN_ENTRIES", "LEVEL_TOLERANCE", "MaxMinState", "max_min_rates"]

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
    import numpy as np

    rates = np.zeros(n_flows)
    spare = np.asarray(capacity_Bps, dtype=np.float64).copy()
    # Unit weights: link counts instead of summed weights (the same numbers: sums of ones are
    # exact), so the common case skips gathering a weight per entry on every pass.
    weight = None if weights is None else np.asarray(weights, dtype=np.float64)
    live_link, live_flow = entry_link, entry_flow
    while len(live_link):
        _, _, staying, _ = _fill_pass(live_link, live_flow, n_flows, spare, weight, rates)
        live_link, live_flow = live_link[staying], live_flow[staying]
    return rates


def _fill_pass(
    live_link: NDArray[np.intp],
    live_flow: NDArray[np.intp],
    n_flows: int,
    spare: NDArray[np.float64],
    weight: NDArray[np.float64] | None,
    rates: NDArray[np.float64],
) -> tuple[float, NDArray[np.bool_], NDArray[np.bool_], NDArray[Any]]:
    """One pass of progressive filling over the live (link, flow) entries: the flows on the
    tightest links get that share (``rates``), their bytes leave ``spare`` (both updated in place).

    Returns the pass's level, the flows it fixed, the entries that stay live, and the per-link
    count (or weight sum) of unfixed flows the pass saw. The fresh solve and the resumable one
    (:class:`MaxMinState`) both run it, so their arithmetic is one and the same.
    """
    import numpy as np

    n_links = len(spare)
    if weight is None:
        unfixed = np.bincount(live_link, minlength=n_links)
    else:
        unfixed = np.bincount(live_link, weights=weight[live_flow], minlength=n_links)
    share = np.divide(spare, unfixed, out=np.full(n_links, np.inf), where=unfixed > 0)
    level = float(share.min())
    tight = share <= level * (1.0 + LEVEL_TOLERANCE)
    newly = np.zeros(n_flows, dtype=bool)
    newly[live_flow[tight[live_link]]] = True
    leaving = newly[live_flow]
    if weight is None:
        rates[newly] = level
        fixed = np.bincount(live_link[leaving], minlength=n_links)
    else:
        rates[newly] = level * weight[newly]
        fixed = np.bincount(live_link[leaving], weights=weight[live_flow[leaving]], minlength=n_links)
    spare -= level * fixed
    np.maximum(spare, 0.0, out=spare)
    return level, newly, ~leaving, unfixed


_UNFIXED = 2**62  # "not fixed by any pass" in MaxMinState.fixed_at
# Below this many (flow, link) entries a solve from scratch (max_min_rates) is cheaper than keeping
# the passes: measured on the parameter-server what-if (16 workers: ~100 entries, resuming 30%
# slower; 64 workers: ~2,700 entries, 14% faster per simulation).
INCREMENTAL_MIN_ENTRIES = 1024


class MaxMinState:
    """Progressive filling that keeps its passes, so that the next solve redoes only those a change reaches.

    Passes before the first one a change can reach are the same operations on the same numbers
    as in a solve from scratch, so resuming there gives the same floats bit for bit:

    - a departing flow fixed in pass j was not on a tight link of any earlier pass (it would have
      been fixed there), so removing it only raises the shares of links that were not the minimum;
      the earlier passes keep their level, their tight links and their spare capacity;
    - an arriving flow leaves a pass unchanged when none of its links, counted with it, has a share
      within the tolerance of that pass's level (:meth:`_first_reached` checks each kept pass).

    ``solve(..., keep=..., new=...)`` says how the flows changed since the last solve: ``keep``
    (one bool per previous flow) the survivors, in their previous order, then ``new`` arrivals;
    the incidence lists passed in list each flow's entries together, flows in that order.
    """

    def __init__(self, capacity_Bps: NDArray[np.float64]) -> None:
        import numpy as np

        self.capacity = np.asarray(capacity_Bps, dtype=np.float64)
        self.levels: list[float] = []
        self.spares: list[NDArray[np.float64]] = []  # spare capacity before each pass, and after the last
        self.unfixed: list[NDArray[np.intp]] = []  # unit weights: unfixed flows per link before each pass
        self.fixed_at = np.zeros(0, dtype=np.intp)
        self.rates = np.zeros(0)
        self.entry_link = np.zeros(0, dtype=np.intp)  # the last solve's incidence
        self.old_flow = np.zeros(0, dtype=np.intp)
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

        entry_link = np.asarray(entry_link, dtype=np.intp)
        entry_flow = np.asarray(entry_flow, dtype=np.intp)
        weight = None if weights is None else np.asarray(weights, dtype=np.float64)
        if capacity_Bps is not None and len(capacity_Bps) != len(self.capacity):
            self.capacity, keep = np.asarray(capacity_Bps, dtype=np.float64), None  # new links: start over
        if len(entry_link) < INCREMENTAL_MIN_ENTRIES:
            self.levels, self.spares, self.unfixed = [], [], []  # the next solve starts afresh
            return max_min_rates(entry_link, entry_flow, n_flows, self.capacity, weight)
        if len(entry_flow) > 1 and bool((entry_flow[1:] < entry_flow[:-1]).any()):
            order = np.argsort(entry_flow, kind="stable")  # each flow's entries together, in their order
            entry_link, entry_flow, keep = entry_link[order], entry_flow[order], None
        start = 0
        delta = None
        if keep is None or new is None or not self.spares or len(keep) != len(self.fixed_at):
            fixed_at = np.full(n_flows, _UNFIXED, dtype=np.intp)
            rates = np.zeros(n_flows)
        else:
            kept = int(np.count_nonzero(keep))
            start = len(self.levels)
            if kept < len(keep):
                start = int(self.fixed_at[~keep].min())
            fixed_at = np.concatenate([self.fixed_at[keep], np.full(new, _UNFIXED, dtype=np.intp)])
            if weight is None and start > 0:
                # unit weights: the kept passes' counts change by the arrivals less the departures
                n_links = len(self.capacity)
                old_link = self.entry_link
                gone = old_link[~keep[self.old_flow]] if kept < len(keep) else old_link[:0]
                delta = np.bincount(entry_link[entry_flow >= kept], minlength=n_links) - np.bincount(
                    gone, minlength=n_links
                )
            if new and start > 0:
                start = self._first_reached(entry_link, entry_flow, fixed_at, kept, weight, start, delta)
            rates = np.concatenate([self.rates[keep], np.zeros(new)])
            redo = fixed_at >= start
            fixed_at[redo] = _UNFIXED
            rates[redo] = 0.0
        if start == 0:
            spare = self.capacity.copy()
            self.levels, self.spares, self.unfixed = [], [], []
        else:
            spare = self.spares[start].copy()
            del self.levels[start:], self.spares[start:], self.unfixed[start:]
            if delta is not None:
                for counts in self.unfixed:
                    counts += delta
        self._fill(entry_link, entry_flow, n_flows, spare, weight, rates, fixed_at, start)
        self.fixed_at, self.rates = fixed_at, rates
        self.entry_link, self.old_flow = entry_link, entry_flow
        return rates

    def _first_reached(
        self,
        entry_link: NDArray[np.intp],
        entry_flow: NDArray[np.intp],
        fixed_at: NDArray[np.intp],
        kept: int,
        weight: NDArray[np.float64] | None,
        before: int,
        delta: NDArray[np.intp] | None,
    ) -> int:
        """The first kept pass (< ``before``) that an arriving flow's links would make tighter, or ``before``.

        On each link an arriving flow crosses, a pass sees the flows not fixed before it, arrivals
        included: with unit weights the pass's kept count plus ``delta`` (exact integers); weighted,
        the sums are added afresh in another order than the solve's, so the share is checked with
        a margin and a pass is kept only when it is surely the same.
        """
        import numpy as np

        n_links = len(self.capacity)
        touched = np.zeros(n_links, dtype=bool)
        touched[entry_link[entry_flow >= kept]] = True
        links = np.flatnonzero(touched)
        if delta is not None and len(self.unfixed) >= before:
            change = delta[links]
            for k in range(before):
                share = self.spares[k][links] / (self.unfixed[k][links] + change)
                if bool((share <= self.levels[k] * (1.0 + LEVEL_TOLERANCE)).any()):
                    return k
            return before
        on = touched[entry_link]
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
        entry_link: NDArray[np.intp],
        entry_flow: NDArray[np.intp],
        n_flows: int,
        spare: NDArray[np.float64],
        weight: NDArray[np.float64] | None,
        rates: NDArray[np.float64],
        fixed_at: NDArray[np.intp],
        first_pass: int,
    ) -> None:
        """Progressive filling of the flows not fixed before ``first_pass``, from ``spare``."""
        if first_pass:
            alive = fixed_at[entry_flow] >= first_pass
            live_link, live_flow = entry_link[alive], entry_flow[alive]
        else:
            live_link, live_flow = entry_link, entry_flow
        # Unit weights: link counts instead of summed weights (the same numbers: sums of ones are
        # exact), so the common case skips gathering a weight per entry on every pass.
        while len(live_link):
            self.spares.append(spare.copy())
            level, newly, staying, unfixed = _fill_pass(live_link, live_flow, n_flows, spare, weight, rates)
            if weight is None:
                self.unfixed.append(unfixed)
            fixed_at[newly] = len(self.levels)
            self.levels.append(level)
            live_link, live_flow = live_link[staying], live_flow[staying]
            self.passes_run += 1
        self.spares.append(spare.copy())
