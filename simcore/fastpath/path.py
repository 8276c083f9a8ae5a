"""Which engine path a synchronous point takes: the fast analytical path or the discrete-event one.

``auto`` (the default) takes the fast path where symmetry holds: one device type, no stragglers,
no jitter. There every rank runs the representative rank's plan and each collective has the
fabric to itself, so the closed forms and the event-free evaluator give the discrete-event result
(to rounding). Anything uneven goes to the discrete-event path, where per-step draws and
per-rank speeds are simulated. ``fast`` and ``des`` force one path for every synchronous point
(the fast evaluator runs any step plan exactly, so ``fast`` on uneven hardware still applies each
step's slowest-rank factor). Parameter-server modes always run their per-rank simulation.
"""

from __future__ import annotations

from simcore.compute.heterogeneity import NO_HETEROGENEITY, Heterogeneity, is_mixed_devices
from simcore.errors import TrainsimError
from simcore.topology import Topology

__all__ = ["DEFAULT_ENGINE_PATH", "ENGINE_PATHS", "ENGINE_PATH_HELP", "check_engine_path", "choose_path"]

ENGINE_PATHS = ("auto", "fast", "des")
DEFAULT_ENGINE_PATH = "auto"
ENGINE_PATH_HELP = (
    "auto: the fast analytical path where every rank is alike, discrete-event simulation otherwise; "
    "fast or des: force one (parameter servers always simulate)"
)


def check_engine_path(path: str) -> str:
    """``path`` if it is known; a :class:`TrainsimError` naming the allowed ones otherwise."""
    if path not in ENGINE_PATHS:
        raise TrainsimError(f"engine path {path!r} is not known; allowed: {', '.join(ENGINE_PATHS)}")
    return path


def choose_path(requested: str, topology: Topology, heterogeneity: Heterogeneity = NO_HETEROGENEITY) -> str:
    """``"fast"`` or ``"des"`` for a synchronous strategy on ``topology`` (see the module docstring)."""
    check_engine_path(requested)
    if requested != "auto":
        return requested
    # Link jitter touches only parameter-server flows: synchronous collectives are priced uncontended.
    if heterogeneity.has_stragglers or heterogeneity.jitter.compute.active or is_mixed_devices(topology):
        return "des"
    return "fast"
