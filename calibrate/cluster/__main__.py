"""``python -m calibrate.cluster``."""

from calibrate.cluster.cli import main

raise SystemExit(main())
