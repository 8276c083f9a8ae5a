"""``python -m calibrate.memory_truth``."""

from calibrate.common.prereq import exit_without_torch

exit_without_torch("calibrate.memory_truth")  # one error line, not an import traceback, without torch

from calibrate.memory_truth.cli import main  # noqa: E402  (imports torch)

raise SystemExit(main())
