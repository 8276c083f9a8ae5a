"""``python -m experiments.validate_memory`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.validate_memory"))
