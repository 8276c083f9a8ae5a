"""Collectives as algorithms over the topology graph, priced in NCCL's structure and run as flows.

Public API::

    collective_time(topology, op, size_bytes, group=None, *, algorithm=None, protocol=None,
                    calibration=None, mode="aggregate", root=None, servers=None, splits=None,
                    options=None) -> CollectiveResult
    start_collective(sim, network, op, size_bytes, group, *, algorithm=None, protocol=None, tag="",
                     mode="aggregate", root=None, servers=None, splits=None, options=None) -> simpy.Process
    concurrent_collective_time(topology, op, size_bytes, groups, *, ...) -> CollectiveResult
    choose_algorithm(topology, op, size_bytes, group=None) -> str
    closed_form_time(topology, op, algorithm, size_bytes, group=None, *, protocol=None, ...) -> float
    price(topology, op, size_bytes, group=None, ...) -> Priced   # plan, phase costs, closed form

``size_bytes`` follows nccl-tests: for all_gather / reduce_scatter it is the whole (concatenated)
buffer; for all_to_all(v) each rank's send buffer; for ps_push / ps_pull the full model (each worker
moves ``size_bytes`` split evenly over the servers). Algorithms per op: :data:`ALGORITHMS`;
protocols: :data:`PROTOCOLS`; modes: :data:`MODES`; NCCL's switches: :class:`NcclOptions`.
"""

from simcore.collectives.api import (
    CollectiveResult,
    LinkRef,
    Priced,
    build_plan,
    choose_algorithm,
    closed_form_time,
    collective_time,
    price,
    start_collective,
)
from simcore.collectives.busbw import busbw_factor
from simcore.collectives.concurrency import concurrent_collective_time
from simcore.collectives.options import NCCL_ALGORITHMS, NcclOptions
from simcore.collectives.plan import STEP_OVERHEAD_S, AlgorithmUnavailable
from simcore.collectives.registry import ALGORITHMS, AUTO, OPS
from simcore.collectives.result import describe_link
from simcore.collectives.runner import MODES
from simcore.collectives.tuning import PROTOCOLS

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "MODES",
    "NCCL_ALGORITHMS",
    "OPS",
    "PROTOCOLS",
    "STEP_OVERHEAD_S",
    "AlgorithmUnavailable",
    "CollectiveResult",
    "LinkRef",
    "NcclOptions",
    "Priced",
    "build_plan",
    "busbw_factor",
    "choose_algorithm",
    "closed_form_time",
    "collective_time",
    "concurrent_collective_time",
    "describe_link",
    "price",
    "start_collective",
]
