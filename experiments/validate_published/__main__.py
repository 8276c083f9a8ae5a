"""``python -m experiments.validate_published``."""

from experiments.validate_published.cli import main

raise SystemExit(main())
