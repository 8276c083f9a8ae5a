"""``python -m experiments.plan``."""

from experiments.plan.cli import main

raise SystemExit(main())
