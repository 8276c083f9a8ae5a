"""nccl-tests' bus-bandwidth factors: busbw = algbw * factor, algbw = size / time.

From nccl-tests' doc/PERFORMANCE.md: all_reduce 2(n-1)/n; reduce_scatter and all_gather (n-1)/n
(size is the whole concatenated buffer); alltoall (n-1)/n (size is each rank's buffer; all_to_allv
likewise); broadcast, reduce and sendrecv 1. Parameter-server
push/pull have no nccl-tests counterpart; their factor is 1 (bytes each worker moves / time).
"""

from __future__ import annotations

from simcore.errors import TrainsimError

__all__ = ["busbw_factor"]


def busbw_factor(op: str, ranks: int) -> float:
    """The factor turning algorithm bandwidth into bus bandwidth for ``op`` on ``ranks`` ranks."""
    if ranks < 1:
        raise TrainsimError(f"a collective needs at least one rank, got {ranks}")
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter", "all_to_all", "all_to_allv"):
        return (ranks - 1) / ranks
    if op in ("broadcast", "reduce", "send_recv", "ps_push", "ps_pull"):
        return 1.0
    raise TrainsimError(
        f"unknown collective {op!r}; allowed: all_reduce, all_gather, reduce_scatter, "
        "broadcast, reduce, send_recv, all_to_all, all_to_allv, ps_push, ps_pull"
    )
