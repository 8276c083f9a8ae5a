"""Check a calibration job's name and arguments on one process, before a template starts every rank.

    python -m calibrate.slurm.preflight calibrate.collectives --out runs/1 -b 8 -e 1G

runs the job's own command line (its ``main``) with the measuring part replaced by a no-op, so a
bad ``JOB`` or ``JOB_ARGS`` fails once, with the job's own one-line ``error:`` and status 2,
instead of once per rank inside torchrun's or srun's failure reports. Prints nothing when the
job and its arguments are fine.
"""

from __future__ import annotations

import importlib
import sys
from unittest import mock

from calibrate.common.prereq import require_torch
from simcore.errors import TrainsimError, cli_entry

__all__ = ["JOBS", "check_job", "main"]

# The jobs the templates launch: their CLI module and the function that does the measuring.
JOBS = {
    "calibrate.collectives": ("calibrate.collectives.cli", "run_sweep"),
    "calibrate.compute": ("calibrate.compute.cli", "run_compute"),
    "calibrate.train": ("calibrate.train.cli", "run_training"),
}


def check_job(job: str, argv: list[str]) -> None:
    """Raise the job's own error for ``argv``, or :class:`TrainsimError` for an unknown ``job``."""
    if job not in JOBS:
        raise TrainsimError(f"JOB={job!r} is not a calibration job; allowed: {', '.join(JOBS)}")
    module_name, runner = JOBS[job]
    require_torch(job)  # every job measures with torch: say so, not an import traceback
    module = importlib.import_module(module_name)
    with mock.patch.object(module, runner, return_value=0):
        module.main(argv)  # the job's cli_entry prints its one error line and exits 2 on bad input


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise TrainsimError("usage: python -m calibrate.slurm.preflight JOB [JOB ARGS...]")
    check_job(args[0], args[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
