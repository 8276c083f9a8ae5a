"""How a claim of the seed study or the article is tested: the :class:`Claim` record, its rule, and
the verdict it computes.

The sources are listed in :mod:`experiments.reproduce_paper.claims` (the study: Ovi, arXiv
2505.12832, 2025).

:func:`judge` applies a claim's rule to its *evidence* (the simulated numbers), so a verdict is
always computed, never written down: ``agrees``, ``partly`` or ``disagrees``, or ``untestable``
when the simulation has no case the claim speaks about, or ``not yet simulated``. The claims
themselves are data in :mod:`experiments.reproduce_paper.claims` (which re-exports these names).

Rules (``tolerance`` is the claim's relative slack):

- ``range`` (a claimed "L-H x"): agrees when the median of the evidence lies in
  [L (1 - tol), H (1 + tol)]; partly when some value does, or the median shows between half the
  claimed effect and twice it (effects measured from the claim's ``null``, the value meaning "no
  effect": 1 for a ratio, 0 for a share): [n + (L - n) / 2, n + 2 (H - n)]; disagrees otherwise.
- ``up-to`` ("up to X"): the largest value of the evidence is the simulator's "up to". Agrees when
  it is within ``tol`` of X (relative), partly when its effect is between half and twice X's
  ([n + (X - n) / 2, n + 2 (X - n)]), disagrees otherwise.
- ``negated`` (a gain cancelled): the evidence is the fraction of the asynchronous gain the
  mitigated protocol keeps, per condition where asynchrony gained anything; a gain counts as
  negated when at most ``tol`` of it is kept. Agrees when every gain is negated, disagrees when none
  is, partly otherwise.
- ``checks`` (a qualitative statement split into sub-statements): evidence 1.0 / 0.0 per check;
  agrees when all hold, disagrees when none does, partly otherwise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from simcore.errors import TrainsimError

__all__ = [
    "AGREES",
    "DISAGREES",
    "NOT_SIMULATED",
    "PARTLY",
    "RULES",
    "UNTESTABLE",
    "Claim",
    "describe_rule",
    "effect_band",
    "judge",
]

AGREES, PARTLY, DISAGREES = "agrees", "partly", "disagrees"
UNTESTABLE, NOT_SIMULATED = "untestable", "not yet simulated"
RULES = ("range", "up-to", "negated", "checks")


@dataclass(frozen=True, slots=True)
class Claim:
    """One statement of a source and how the simulator tests it."""

    id: str
    source: str
    statement: str  # the source's words
    reading: str  # what we compare, against which baseline, and why that reading
    rule: str  # one of RULES
    low: float = 0.0  # range: L; up-to: X; checks / negated: unused
    high: float = 0.0  # range: H
    tolerance: float = 0.1
    unit: str = "x"
    null: float = 1.0  # the value that means "no effect": 1 for ratios, 0 for shares and points
    claimed: str = ""  # the claim in a few characters, for the summary table
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise TrainsimError(f"claim {self.id}: rule {self.rule!r} unknown; allowed: {', '.join(RULES)}")


def effect_band(claim: Claim) -> tuple[float, float]:
    """Values showing between half the claim's smallest effect and twice its largest (the partly band)."""
    n = claim.null
    high = claim.high if claim.rule == "range" else claim.low
    return n + (claim.low - n) / 2, n + 2 * (high - n)


def _range_verdict(values: Sequence[float], claim: Claim) -> str:
    lo, hi = claim.low * (1 - claim.tolerance), claim.high * (1 + claim.tolerance)
    middle = statistics.median(values)
    if lo <= middle <= hi:
        return AGREES
    band_lo, band_hi = effect_band(claim)
    if any(lo <= v <= hi for v in values) or band_lo <= middle <= band_hi:
        return PARTLY
    return DISAGREES


def _up_to_verdict(values: Sequence[float], claim: Claim) -> str:
    peak = max(values)
    if abs(peak / claim.low - 1) <= claim.tolerance:
        return AGREES
    band_lo, band_hi = effect_band(claim)
    return PARTLY if band_lo <= peak <= band_hi else DISAGREES


def _share_verdict(flags: Sequence[bool]) -> str:
    if all(flags):
        return AGREES
    return PARTLY if any(flags) else DISAGREES


def judge(claim: Claim, evidence: Sequence[float]) -> str:
    """The verdict of ``claim``'s rule on ``evidence`` (see the module docstring)."""
    if not evidence:
        return UNTESTABLE
    if claim.rule == "range":
        return _range_verdict(evidence, claim)
    if claim.rule == "up-to":
        return _up_to_verdict(evidence, claim)
    if claim.rule == "negated":
        return _share_verdict([kept <= claim.tolerance for kept in evidence])
    return _share_verdict([value >= 0.5 for value in evidence])


def describe_rule(claim: Claim) -> str:
    """The claim's rule in one line, with its numbers."""
    tol, unit = claim.tolerance, claim.unit
    band_lo, band_hi = effect_band(claim)
    if claim.rule == "range":
        return (
            f"agrees if the median is in [{claim.low * (1 - tol):g}, {claim.high * (1 + tol):g}]{unit}; "
            f"partly if some value is, or the median is in [{band_lo:g}, {band_hi:g}]{unit}"
        )
    if claim.rule == "up-to":
        return (
            f"agrees if the largest value is within {tol:.0%} of {claim.low:g}{unit}; "
            f"partly if it is in [{band_lo:g}, {band_hi:g}]{unit}"
        )
    if claim.rule == "negated":
        return f"a gain is negated when the mitigated protocol keeps <= {tol:.0%} of it; agrees if all are"
    return "agrees if every check holds, partly if some do, disagrees if none does"
