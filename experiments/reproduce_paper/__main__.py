"""``python -m experiments.reproduce_paper``."""

from experiments.reproduce_paper.cli import main

raise SystemExit(main())
