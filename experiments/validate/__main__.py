"""``python -m experiments.validate`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.validate"))
