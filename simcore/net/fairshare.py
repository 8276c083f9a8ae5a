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

__all__ = ["LEVEL_TOLERANCE", "max_min_rates"]

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

    n_links = len(capacity_Bps)
    rates = np.zeros(n_flows)
    spare = np.asarray(capacity_Bps, dtype=np.float64).copy()
    # Unit weights: link counts instead of summed weights (the same numbers: sums of ones are
    # exact), so the common case skips gathering a weight per entry on every pass.
    weight = None if weights is None else np.asarray(weights, dtype=np.float64)
    live_link, live_flow = entry_link, entry_flow
    while len(live_link):
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
    return rates
