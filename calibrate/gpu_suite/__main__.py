"""``python -m calibrate.gpu_suite`` (``--help`` from the light parser, before the simulator is imported)."""

import sys

from calibrate.gpu_suite.args import answer_help

answer_help(sys.argv[1:])

from calibrate.gpu_suite.cli import main  # noqa: E402  (after --help on purpose: the step model is heavy)

raise SystemExit(main())
