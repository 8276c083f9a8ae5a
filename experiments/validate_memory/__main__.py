"""``python -m experiments.validate_memory``."""

from experiments.validate_memory.cli import main

raise SystemExit(main())
