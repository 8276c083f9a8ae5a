"""``python -m experiments.what_if``."""

from experiments.what_if.cli import main

raise SystemExit(main())
