"""Which algorithms implement which collective: a registry dict per op, keyed by plain names.

A builder maps (:class:`PlanContext`, size in bytes) to the phases of the algorithm; it raises
:class:`AlgorithmUnavailable` when the group or topology cannot run it. NCCL's algorithms keep
NCCL's names (``ring``, ``tree``, ``nvls``, ``nvls_tree``, ``collnet_direct``, ``pat``); ``direct``
(one-shot over a switch), ``hierarchical`` (three sequential rings) and the parameter-server
exchanges are trainsim's own, run only when pinned or for their op.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.collectives import (
    alltoall,
    direct,
    hierarchical,
    in_network,
    param_server,
    pat,
    point_to_point,
    ring,
    tree,
)
from simcore.collectives.plan import Phase, PlanContext

__all__ = ["ALGORITHMS", "AUTO", "OPS", "Builder"]

Builder = Callable[[PlanContext, float], tuple[Phase, ...]]

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "send_recv",
    "all_to_all",
    "all_to_allv",
    "ps_push",
    "ps_pull",
)

ALGORITHMS: dict[str, dict[str, Builder]] = {
    "all_reduce": {
        "ring": ring.all_reduce,
        "tree": tree.all_reduce,
        "nvls": in_network.nvls_all_reduce,
        "nvls_tree": in_network.nvls_tree_all_reduce,
        "collnet_direct": in_network.collnet_direct_all_reduce,
        "hierarchical": hierarchical.all_reduce,
        "direct": direct.all_reduce,
    },
    "all_gather": {
        "ring": ring.all_gather,
        "nvls": in_network.nvls_all_gather,
        "pat": pat.all_gather,
        "direct": direct.all_gather,
    },
    "reduce_scatter": {
        "ring": ring.reduce_scatter,
        "nvls": in_network.nvls_reduce_scatter,
        "pat": pat.reduce_scatter,
        "direct": direct.reduce_scatter,
    },
    "broadcast": {"ring": point_to_point.broadcast},
    "reduce": {"ring": point_to_point.reduce},
    "send_recv": {"p2p": point_to_point.send_recv},
    "all_to_all": {"p2p": alltoall.all_to_all},
    "all_to_allv": {"p2p": alltoall.all_to_allv},
    "ps_push": {"ps": param_server.ps_push},
    "ps_pull": {"ps": param_server.ps_pull},
}

# The candidates NCCL's tuner weighs per op (src/graph/tuning.cc), in tie-break order.
AUTO: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "collnet_direct"),
    "all_gather": ("ring", "nvls", "pat"),
    "reduce_scatter": ("ring", "nvls", "pat"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "send_recv": ("p2p",),
    "all_to_all": ("p2p",),
    "all_to_allv": ("p2p",),
    "ps_push": ("ps",),
    "ps_pull": ("ps",),
}
