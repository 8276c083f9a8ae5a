"""``python -m experiments.validate``."""

from experiments.validate.cli import main

raise SystemExit(main())
