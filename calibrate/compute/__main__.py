"""``python -m calibrate.compute``."""

from calibrate.compute.cli import main

raise SystemExit(main())
