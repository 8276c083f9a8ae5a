"""Progress and notes on stderr for the studies: :mod:`simcore.progress`, where the calibration
jobs can use it too."""

from simcore.progress import bar, echo, note, shown, track, warn

__all__ = ["bar", "echo", "note", "shown", "track", "warn"]
