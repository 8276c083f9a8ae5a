"""``python -m experiments.validate_parallel``."""

from experiments.validate_parallel.cli import main

raise SystemExit(main())
