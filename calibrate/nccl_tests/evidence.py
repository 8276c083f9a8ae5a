"""Which collective an nccl-tests log measured, told from its own rows when its name does not say.

A Slurm job's output (``slurm-1234.out``) names no program, and nccl-tests before v2.17 prints no
"Collective test starting" line. Its rows still tell, by what nccl-tests prints (NVIDIA/nccl-tests,
``src/<test>.cu``):

- **busbw / algbw** is a factor of the collective and the rank count ``n`` only (``*GetBw``;
  ``doc/PERFORMANCE.md``): ``2(n-1)/n`` for all_reduce; ``(n-1)/n`` for all_gather,
  reduce_scatter and alltoall; 1 for broadcast, reduce and sendrecv. Both are printed rounded, so a
  factor fits when every row agrees within the printed precision.
- **root** is the root rank (>= 0) for broadcast and reduce, -1 for the others (``*RunTest``).
- **redop** names the reduction for all_reduce, reduce_scatter, reduce, and for sendrecv (which
  loops over the operations although it reduces nothing); all_gather, alltoall and broadcast print
  ``none`` (broadcast an empty field in old versions).

A log whose evidence fits more than one collective (all_gather and alltoall print the same) or none
is refused with the candidates and how to name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simcore.calibration.profile import busbw_factor
from simcore.errors import TrainsimError

__all__ = ["OPS", "Bandwidths", "candidate_ops", "half_unit", "infer_op"]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "send_recv")
_ROOTED = frozenset({"broadcast", "reduce"})
_NAMES_A_REDUCTION = frozenset({"all_reduce", "reduce_scatter", "reduce", "send_recv"})
_HINT = "name the file after the nccl-tests program (e.g. all_reduce_perf.txt) or pass --op"


@dataclass(frozen=True, slots=True)
class Bandwidths:
    """One row's algorithm and bus bandwidth (GB/s) and how far each may be from the exact value
    (half a unit of the last printed digit; next to nothing for -J JSON's full-precision numbers)."""

    algbw: float
    busbw: float
    algbw_error: float = 0.0
    busbw_error: float = 0.0

    def fits(self, factor: float) -> bool:
        slack = self.busbw_error + factor * self.algbw_error + 1e-9 * self.busbw
        return abs(self.busbw - factor * self.algbw) <= slack


def half_unit(token: str) -> float:
    """Half a unit in the last place of a printed number: ``'12.34'`` -> 0.005, ``'1.6e+07'`` -> 5e5."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    try:
        scale = 10.0 ** int(exponent) if exponent else 1.0
    except (ValueError, OverflowError):
        return float("inf")
    return 0.5 * 10.0**-decimals * scale


def candidate_ops(
    ranks: int, rows: Iterable[Bandwidths], roots: Iterable[int], redops: Iterable[str]
) -> list[str]:
    """The collectives every piece of evidence fits (see the module docstring)."""
    ops = list(OPS)
    measured = [r for r in rows if r.algbw > 0 and r.busbw > 0]
    if measured and ranks >= 1:
        ops = [op for op in ops if all(r.fits(busbw_factor(op, ranks)) for r in measured)]
    root_set = set(roots)
    if root_set:
        rooted = any(root >= 0 for root in root_set)
        ops = [op for op in ops if (op in _ROOTED) == rooted]
    names = {name.strip().lower() for name in redops}
    if names:
        reduction = any(name not in ("", "none") for name in names)
        ops = [op for op in ops if (op in _NAMES_A_REDUCTION) == reduction]
    return ops


def infer_op(
    ranks: int, rows: Sequence[Bandwidths], roots: Iterable[int], redops: Iterable[str], where: str
) -> str:
    """The one collective the evidence fits; TrainsimError naming the candidates otherwise."""
    ops = candidate_ops(ranks, rows, roots, redops)
    if len(ops) == 1:
        return ops[0]
    if ops:
        raise TrainsimError(
            f"{where}: cannot tell which collective this is: its rows fit {' or '.join(ops)}; {_HINT}"
        )
    raise TrainsimError(f"{where}: cannot tell which collective this is: its busbw/algbw, root and redop fit no "
                        f"collective on {ranks} ranks (is the rank count right?); {_HINT}")  # fmt: skip
