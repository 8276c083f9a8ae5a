"""What a calibration job checks before it touches anything: torch, and the place its records go.

Measurements are slow to take and cannot be taken again on the same cluster later, so a job never
adds to or replaces earlier ones by accident:

- a job writing a measurement folder (``calibrate.collectives``, ``calibrate.compute``) refuses an
  ``--out`` that already holds its record files, unless ``--resume`` (skip what they hold, measure
  the rest) or ``--force`` (add a new measurement to them); other files there are not its own and
  are left alone, so ``collectives`` and ``compute`` can share one folder for ``calibrate.fit``;
- a job appending to one record file (``calibrate.train``, ``calibrate.memory_truth``) refuses an
  existing non-empty file on the same terms;
- an output that is the wrong kind of thing (a file where a folder is needed, or the reverse) or
  in a place this user cannot write is refused;
- the output is locked while the job runs (:class:`simcore.output.OutLock`): a second job on the
  same folder or file is refused with the first one's pid, so two sweeps never append the same
  measurements twice.

Only the process that writes checks: rank 0 for a folder only it writes, every rank for a file
each appends to. No rank writes before every rank has joined the process group, so one rank's
check never sees another's records of the same run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from calibrate.common.launch import launch_rank
from simcore.cliargs import output_dir, output_file
from simcore.errors import TrainsimError, run_scope
from simcore.output import OutLock

__all__ = ["check_measurement_dir", "check_record_file", "require_torch"]


def require_torch(command: str) -> None:
    """TrainsimError when torch is not installed, for a job that imports it only once its options
    are checked (a job importing it at module level ends with the one line ``calibrate``'s
    ``__init__`` prints instead of an import traceback)."""
    if importlib.util.find_spec("torch") is None:
        raise TrainsimError(
            f"{command} measures with torch, which is not installed; pip install torch "
            "(or the project's calibrate extra)"
        )


def _held(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def check_measurement_dir(out: str, files: Sequence[str], *, resume: bool, force: bool) -> Path:
    """The folder ``out`` after the checks above, locked until the command ends
    (:func:`simcore.cliargs.output_dir`); ``files`` are the job's own record files."""
    folder = output_dir(out, force=True)  # a file in the way, or a place that cannot be written
    assert folder is not None  # out is given
    held = [name for name in files if _held(folder / name)]
    if held and not (resume or force):
        raise TrainsimError(
            f"--out {out!r} already holds earlier measurements ({', '.join(held)}); add --resume to "
            "measure only what they lack, --force to add a new measurement to them, or choose a new folder"
        )
    return folder


def check_record_file(out: str, *, resume: bool, force: bool) -> Path:
    """The record file ``out`` after the checks above, locked (:meth:`simcore.output.OutLock.for_file`)
    by the first rank until the command ends, so two jobs never append to one file at once."""
    path = output_file(out, force=True)  # a folder in the way, or a place that cannot be written
    scope = run_scope()
    if scope is not None and launch_rank() == 0:  # one writer per file: a second job is refused
        scope.enter_context(OutLock.for_file(path))
    if _held(path) and not (resume or force):
        raise TrainsimError(
            f"--out {out!r} already holds earlier records; add --resume to continue them, --force to "
            "append a new run to them, or choose a new file"
        )
    return path
