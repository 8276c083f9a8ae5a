"""``python -m experiments.check_shards`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.check_shards"))
