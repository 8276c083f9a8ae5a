"""``python -m calibrate.memory_truth``."""

from calibrate.memory_truth.cli import main

raise SystemExit(main())
