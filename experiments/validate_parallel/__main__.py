"""``python -m experiments.validate_parallel`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.validate_parallel"))
