"""Which algorithms implement which collective: a registry dict per op, keyed by plain names.

A builder maps (:class:`PlanContext`, size in bytes) to the phases of the algorithm; it raises
:class:`AlgorithmUnavailable` when the group or topology cannot run it.
"""

from __future__ import annotations

from collections.abc import Callable

from simcore.collectives import direct, hierarchical, in_network, param_server, point_to_point, ring, tree
from simcore.collectives.plan import Phase, PlanContext

__all__ = ["ALGORITHMS", "OPS", "Builder"]

Builder = Callable[[PlanContext, float], tuple[Phase, ...]]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv", "ps_push", "ps_pull")

ALGORITHMS: dict[str, dict[str, Builder]] = {
    "all_reduce": {
        "ring": ring.all_reduce,
        "tree": tree.all_reduce,
        "hierarchical": hierarchical.all_reduce,
        "direct": direct.all_reduce,
        "nvls": in_network.nvls_all_reduce,
        "sharp": in_network.sharp_all_reduce,
    },
    "all_gather": {"ring": ring.all_gather, "direct": direct.all_gather, "nvls": in_network.nvls_all_gather},
    "reduce_scatter": {
        "ring": ring.reduce_scatter,
        "direct": direct.reduce_scatter,
        "nvls": in_network.nvls_reduce_scatter,
    },
    "broadcast": {"ring": point_to_point.broadcast},
    "reduce": {"ring": point_to_point.reduce},
    "send_recv": {"p2p": point_to_point.send_recv},
    "ps_push": {"ps": param_server.ps_push},
    "ps_pull": {"ps": param_server.ps_pull},
}
