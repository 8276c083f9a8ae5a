"""``python -m calibrate.testbed``."""

from calibrate.testbed.cli import main

raise SystemExit(main())
