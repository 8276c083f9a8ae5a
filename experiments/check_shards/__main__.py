"""``python -m experiments.check_shards``."""

from experiments.check_shards.cli import main

raise SystemExit(main())
