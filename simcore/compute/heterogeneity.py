"""Uneven hardware: per-rank speed factors, stragglers, and seeded jitter on compute and links.

Three sources make ranks of one cluster run at different speeds:

- **Mixed devices.** The topology says which GPU each rank runs on (``Topology.gpu_spec_name``);
  a cluster of A100 and A10G nodes gives two compute speeds. :func:`rank_compute_times` prices one
  gradient (forward + backward of the rank's micro-batches) on every rank's own device with
  :class:`simcore.compute.roofline.ComputeModel`, and :func:`rank_speed_factors` turns that into
  compute-time multipliers relative to a reference device (both in :mod:`simcore.compute.rank_speed`,
  re-exported here).
- **Stragglers.** ``RANK:FACTOR`` (:func:`parse_straggler`): rank RANK computes FACTOR times slower
  (a thermally throttled GPU, a noisy neighbour, a slow host).
- **Jitter.** A seeded random multiplier drawn afresh per step and rank (compute) or per flow
  (links): ``lognormal:SIGMA`` is exp(N(0, SIGMA^2)), median 1, as the synchronous step runner uses; ``none``
  is exactly 1. A jitter spec names both: ``"compute=lognormal:0.1,link=lognormal:0.05"``
  (:func:`parse_jitter`). Link jitter multiplies a flow's bytes on the wire: it stands for lost
  throughput (retransmissions, congestion-control inefficiency) and loads the links as such loss
  does.

A synchronous step waits for its slowest rank, so its compute is scaled by the *maximum* of the
ranks' factors (:meth:`Heterogeneity.sync_step_factor`); an asynchronous parameter server lets each
worker run at its own factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcore.compute.rank_speed import device_gradient_time_s, rank_compute_times, rank_speed_factors
from simcore.errors import TrainsimError

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.engine import Simulation
    from simcore.topology import Topology
    from simcore.workload.types import Workload

__all__ = [
    "JITTER_KINDS",
    "NO_HETEROGENEITY",
    "Heterogeneity",
    "Jitter",
    "JitterSpec",
    "Straggler",
    "device_gradient_time_s",
    "is_mixed_devices",
    "parse_jitter",
    "parse_straggler",
    "rank_compute_times",
    "rank_speed_factors",
    "sync_compute_scale",
]

JITTER_KINDS = ("none", "lognormal")
JITTER_TARGETS = ("compute", "link")
_JITTER_EXAMPLE = "e.g. 'compute=lognormal:0.1,link=lognormal:0.05' or 'none'"
# A sigma this large makes the p99 factor exp(2.33 * 2) ~ 100x: surely a typo for a percentage.
MAX_JITTER_SIGMA = 2.0


@dataclass(frozen=True, slots=True)
class Jitter:
    """A random multiplier: ``none`` (always 1) or ``lognormal`` with log-space ``sigma`` (median 1)."""

    kind: str = "none"
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in JITTER_KINDS:
            raise TrainsimError(
                f"jitter distribution {self.kind!r} is not known; allowed: {', '.join(JITTER_KINDS)}"
            )
        if not math.isfinite(self.sigma) or not 0.0 <= self.sigma <= MAX_JITTER_SIGMA:
            raise TrainsimError(f"jitter sigma must be between 0 and {MAX_JITTER_SIGMA}, got {self.sigma!r}")

    @property
    def active(self) -> bool:
        """Whether draws can differ from 1."""
        return self.kind != "none" and self.sigma > 0.0

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` multipliers; no random numbers are consumed when inactive."""
        import numpy as np

        if not self.active:
            return np.ones(size)
        return rng.lognormal(0.0, self.sigma, size=size)

    def describe(self) -> str:
        return "none" if not self.active else f"{self.kind}:{self.sigma:g}"


@dataclass(frozen=True, slots=True)
class JitterSpec:
    """Jitter on compute (per rank and step) and on links (per flow)."""

    compute: Jitter = field(default_factory=Jitter)
    link: Jitter = field(default_factory=Jitter)

    @property
    def active(self) -> bool:
        return self.compute.active or self.link.active

    def describe(self) -> str:
        """The spec in the form :func:`parse_jitter` reads."""
        if not self.active:
            return "none"
        return f"compute={self.compute.describe()},link={self.link.describe()}"


def _parse_jitter_term(term: str, spec_text: str) -> Jitter:
    kind, _, sigma_text = term.partition(":")
    kind = kind.strip().lower()
    if kind not in JITTER_KINDS:
        raise TrainsimError(
            f"jitter spec {spec_text!r}: distribution {kind!r} is not known; allowed: "
            f"{', '.join(JITTER_KINDS)} ({_JITTER_EXAMPLE})"
        )
    if kind == "none":
        if sigma_text.strip():
            raise TrainsimError(f"jitter spec {spec_text!r}: 'none' takes no parameter")
        return Jitter()
    try:
        sigma = float(sigma_text)
    except ValueError:
        raise TrainsimError(f"jitter spec {spec_text!r}: {kind} needs a sigma, e.g. {kind}:0.1") from None
    try:
        return Jitter(kind, sigma)
    except TrainsimError as exc:
        raise TrainsimError(f"jitter spec {spec_text!r}: {exc}") from None


def parse_jitter(text: str | None) -> JitterSpec:
    """A :class:`JitterSpec` from ``"compute=lognormal:0.1,link=lognormal:0.05"``, ``"none"`` or ``""``.

    A bare distribution (``"lognormal:0.1"``) applies to compute only.
    """
    spec_text = (text or "").strip()
    if spec_text.lower() in ("", "none"):
        return JitterSpec()
    parts: dict[str, Jitter] = {}
    for term in spec_text.split(","):
        target, sep, value = term.partition("=")
        if not sep:
            target, value = "compute", term
        target = target.strip().lower()
        if target not in JITTER_TARGETS:
            raise TrainsimError(
                f"jitter spec {spec_text!r}: target {target!r} is not known; allowed: "
                f"{', '.join(JITTER_TARGETS)} ({_JITTER_EXAMPLE})"
            )
        if target in parts:
            raise TrainsimError(f"jitter spec {spec_text!r}: {target} is given twice")
        parts[target] = _parse_jitter_term(value, spec_text)
    return JitterSpec(parts.get("compute", Jitter()), parts.get("link", Jitter()))


# A rank more than a thousand times slower has failed rather than straggled (throttled or degraded
# GPUs in production reports run a few times slower); beyond it a step's times reach 1e300 s and
# more, which no report or trace can represent.
MAX_STRAGGLER_FACTOR = 1000.0


@dataclass(frozen=True, slots=True)
class Straggler:
    """Rank ``rank`` computes ``factor`` times slower than its device would."""

    rank: int
    factor: float

    def __post_init__(self) -> None:
        if self.rank < 0:
            raise TrainsimError(f"straggler rank must be >= 0, got {self.rank}")
        if not math.isfinite(self.factor) or not 1.0 <= self.factor <= MAX_STRAGGLER_FACTOR:
            raise TrainsimError(
                f"straggler factor must be a number from 1 to {MAX_STRAGGLER_FACTOR:g} (times slower), "
                f"got {self.factor:g}"
            )


def parse_straggler(text: str) -> Straggler:
    """``"RANK:FACTOR"``, e.g. ``"3:2.5"``: rank 3 computes 2.5 times slower."""
    rank_text, sep, factor_text = str(text).partition(":")
    try:
        if not sep:
            raise ValueError
        rank, factor = int(rank_text), float(factor_text)
    except ValueError:
        raise TrainsimError(
            f"straggler {text!r}: expected RANK:FACTOR, e.g. 3:2.5 (rank 3 computes 2.5x slower)"
        ) from None
    try:
        return Straggler(rank, factor)
    except TrainsimError as exc:
        raise TrainsimError(f"straggler {text!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Heterogeneity:
    """Stragglers and jitter for one run (mixed devices come from the topology itself)."""

    stragglers: tuple[Straggler, ...] = ()
    jitter: JitterSpec = field(default_factory=JitterSpec)

    @classmethod
    def from_strings(cls, stragglers: Iterable[str] = (), jitter: str | None = None) -> Heterogeneity:
        """Parse ``--straggler`` values and a jitter spec (the command-line boundary)."""
        parsed = tuple(parse_straggler(s) for s in stragglers)
        ranks = [s.rank for s in parsed]
        if len(set(ranks)) != len(ranks):
            raise TrainsimError(
                f"--straggler: a rank is given twice ({sorted(ranks)}); give one factor per rank"
            )
        return cls(parsed, parse_jitter(jitter))

    @property
    def stochastic(self) -> bool:
        """Whether steps differ from one another (jitter draws)."""
        return self.jitter.active

    @property
    def has_stragglers(self) -> bool:
        return any(s.factor > 1.0 for s in self.stragglers)

    def check(self, world_size: int) -> None:
        """A :class:`TrainsimError` if a straggler names a rank the cluster lacks."""
        for s in self.stragglers:
            if s.rank >= world_size:
                raise TrainsimError(
                    f"straggler rank {s.rank} is not in this cluster: ranks are 0..{world_size - 1}"
                )

    def restricted(self, world_size: int) -> Heterogeneity:
        """The same, without stragglers on ranks a smaller run (e.g. a one-GPU baseline) lacks."""
        return Heterogeneity(tuple(s for s in self.stragglers if s.rank < world_size), self.jitter)

    def why(self, topology: Topology) -> str:
        """What makes ``topology``'s ranks uneven, in words ("" when nothing does)."""
        parts = []
        devices = sorted({topology.gpu_spec_name(r) or "cpu" for r in range(topology.world_size)})
        if len(devices) > 1:
            parts.append("mixed " + " and ".join(devices))
        parts += [f"rank {s.rank} {s.factor:g}x slower" for s in self.stragglers if s.factor > 1.0]
        return ", ".join(parts)

    def ideal_ranks(self, world_size: int) -> float:
        """How many copies of rank 0 the first ``world_size`` ranks are worth at compute: the sum of
        f_0 / f_r over the ranks' straggler factors (``world_size`` when no rank is slowed).

        A scaling efficiency against a one-GPU baseline (which runs on rank 0) divides by this rather
        than by the GPU count, so a slow rank 0 does not make N GPUs look more than N times faster.
        """
        factors = {s.rank: s.factor for s in self.stragglers}
        first = factors.get(0, 1.0)
        return math.fsum(first / factors.get(rank, 1.0) for rank in range(world_size))

    def straggler_factors(self, world_size: int) -> np.ndarray:
        """Per-rank slowdown from stragglers (1 for ranks that are not stragglers)."""
        import numpy as np

        self.check(world_size)
        factors = np.ones(world_size)
        for s in self.stragglers:
            factors[s.rank] = s.factor
        return factors

    def rank_factors(self, rng: np.random.Generator, base: Sequence[float] | np.ndarray) -> np.ndarray:
        """One step's compute-time multiplier per rank: ``base`` x straggler x a fresh jitter draw."""
        import numpy as np

        base_arr = np.asarray(base, dtype=float)
        return base_arr * self.straggler_factors(len(base_arr)) * self.jitter.compute.draw(rng, len(base_arr))

    def sync_step_factor(self, rng: np.random.Generator, base: Sequence[float] | np.ndarray) -> float:
        """A synchronous step's compute multiplier: the slowest rank's (everyone waits for it)."""
        import numpy as np

        return float(np.max(self.rank_factors(rng, base)))

    def uneven(self, topology: Topology) -> bool:
        """Uneven hardware: mixed devices or a straggler (the parameter-server branch of the advice)."""
        return self.has_stragglers or is_mixed_devices(topology)

    def describe(self) -> str:
        parts = [f"rank {s.rank} x{s.factor:g}" for s in self.stragglers]
        if self.jitter.active:
            parts.append(f"jitter {self.jitter.describe()}")
        return ", ".join(parts) or "none"


NO_HETEROGENEITY = Heterogeneity()


def is_mixed_devices(topology: Topology) -> bool:
    """Whether the ranks run on more than one device type."""
    return len({topology.gpu_spec_name(r) for r in range(topology.world_size)}) > 1


def sync_compute_scale(
    topology: Topology,
    workload: Workload,
    dtype: str,
    micro_batch: int,
    heterogeneity: Heterogeneity,
    *,
    reference: str | None = None,
    recompute: bool = False,
    calibration: CalibrationProfile | None = None,
) -> Callable[[Simulation, int], float] | None:
    """A synchronous strategy's per-step compute multiplier, or None when every rank is alike.

    The representative rank's plan is priced on ``reference`` (the what-if uses the slowest device,
    :func:`simcore.strategies.runner.gating_device`); each simulated step multiplies its compute by
    the slowest rank's factor that step: its device's time relative to ``reference``, times its
    straggler factor, times a fresh jitter draw from the simulation's seeded RNG.
    """
    import numpy as np

    mixed = is_mixed_devices(topology)
    if not mixed and not heterogeneity.has_stragglers and not heterogeneity.jitter.compute.active:
        return None
    heterogeneity.check(topology.world_size)
    base = (
        rank_speed_factors(
            topology,
            workload,
            dtype,
            micro_batch,
            reference=reference,
            recompute=recompute,
            calibration=calibration,
        )
        if mixed
        else np.ones(topology.world_size)
    )

    def scale(sim: Simulation, step: int) -> float:
        return heterogeneity.sync_step_factor(sim.rng, base)

    return scale
