"""``python -m calibrate.gpu_suite``."""

from calibrate.gpu_suite.cli import main

raise SystemExit(main())
