"""``python -m calibrate.fit``."""

from calibrate.fit.cli import main

raise SystemExit(main())
