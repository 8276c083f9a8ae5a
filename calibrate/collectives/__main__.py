"""``python -m calibrate.collectives``."""

from calibrate.collectives.cli import main

raise SystemExit(main())
