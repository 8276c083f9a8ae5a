"""``python -m calibrate.collectives``."""

from calibrate.common.prereq import exit_without_torch

exit_without_torch("calibrate.collectives")  # one error line, not an import traceback, without torch

from calibrate.collectives.cli import main  # noqa: E402  (imports torch)

raise SystemExit(main())
