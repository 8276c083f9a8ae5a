"""Collectives as algorithms over the topology graph, with closed forms and discrete-event runs.

Public API::

    collective_time(topology, op, size_bytes, group=None, *, algorithm=None, calibration=None,
                    mode="aggregate", root=None, servers=None) -> CollectiveResult
    start_collective(sim, network, op, size_bytes, group, *, algorithm=None, tag="",
                     mode="aggregate", root=None, servers=None) -> simpy.Process
    choose_algorithm(topology, op, size_bytes, group=None) -> str
    closed_form_time(topology, op, algorithm, size_bytes, group=None, *, root=None, servers=None) -> float

``size_bytes`` follows nccl-tests: for all_gather / reduce_scatter it is the whole (concatenated)
buffer; for ps_push / ps_pull it is the full model (each worker moves ``size_bytes`` split evenly
over the servers). Algorithms per op: :data:`ALGORITHMS`; modes: :data:`MODES`.
"""

from simcore.collectives.api import (
    CollectiveResult,
    build_plan,
    choose_algorithm,
    closed_form_time,
    collective_time,
    start_collective,
)
from simcore.collectives.busbw import busbw_factor
from simcore.collectives.plan import STEP_OVERHEAD_S, AlgorithmUnavailable
from simcore.collectives.registry import ALGORITHMS, OPS
from simcore.collectives.runner import MODES

__all__ = [
    "ALGORITHMS",
    "MODES",
    "OPS",
    "STEP_OVERHEAD_S",
    "AlgorithmUnavailable",
    "CollectiveResult",
    "build_plan",
    "busbw_factor",
    "choose_algorithm",
    "closed_form_time",
    "collective_time",
    "start_collective",
]
