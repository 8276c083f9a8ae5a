"""``python -m calibrate.compute``."""

from calibrate.common.prereq import exit_without_torch

exit_without_torch("calibrate.compute")  # one error line, not an import traceback, without torch

from calibrate.compute.cli import main  # noqa: E402  (imports torch)

raise SystemExit(main())
