"""``python -m experiments.staleness_accuracy``."""

from experiments.staleness_accuracy.cli import main

raise SystemExit(main())
