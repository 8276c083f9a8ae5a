"""``python -m experiments.bench``."""

from experiments.bench.cli import main

raise SystemExit(main())
