"""How big a cluster spec asks to be, checked against :mod:`simcore.limits` before anything is built.

A spec says ``count: 100000000`` in a few bytes; building it would take hours and all memory. The
totals (GPUs, devices, links) follow from the node types' sizes times the counts, so they are
known, and refused, before a single server is laid out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from simcore.limits import DEVICES_PER_CLUSTER, GPUS_PER_CLUSTER, LINKS_PER_CLUSTER
from topologies.spec_types import ClusterSpec, NodeType
from topologies.yamlcheck import check_bound

__all__ = ["check_cluster_size", "check_node_counts"]


def check_node_counts(
    node_types: Mapping[str, NodeType], nodes: Sequence[tuple[str, int]], where: str
) -> None:
    """The GPUs, devices and links that ``nodes`` (type, count) of ``node_types`` make, within bounds."""
    subject = " + ".join(f"{count:,} x {name}" for name, count in nodes[:4])
    subject += " + ..." if len(nodes) > 4 else ""
    totals = (
        (GPUS_PER_CLUSTER, sum(len(node_types[t].ranks) * c for t, c in nodes)),
        (DEVICES_PER_CLUSTER, sum(len(node_types[t].devices) * c for t, c in nodes)),
        (LINKS_PER_CLUSTER, sum(len(node_types[t].links) * c for t, c in nodes)),
    )
    for bound, total in totals:
        check_bound(bound, total, where, subject)


def check_cluster_size(
    spec: ClusterSpec, where: str, *, gpus: int | None = None, nodes: int | None = None
) -> None:
    """``spec`` as built with ``gpus`` ranks or ``nodes`` servers (of its first node type) is within bounds."""
    if gpus is not None:
        check_bound(GPUS_PER_CLUSTER, gpus, where, f"gpus={gpus}")
    groups = list(spec.nodes)
    if nodes is not None and groups:
        groups = [(groups[0][0], nodes)]
    elif gpus is not None and len(groups) == 1:  # as many servers as `gpus` ranks need
        per_host = max(1, len(spec.node_types[groups[0][0]].ranks))
        groups = [(groups[0][0], math.ceil(gpus / per_host))]
    check_node_counts(spec.node_types, groups, where)
