"""``python -m experiments.nccl_sim``."""

from experiments.nccl_sim.cli import main

raise SystemExit(main())
