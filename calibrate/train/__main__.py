"""``python -m calibrate.train``."""

from calibrate.train.cli import main

raise SystemExit(main())
